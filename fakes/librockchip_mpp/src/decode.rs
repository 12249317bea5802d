//! The ffmpeg decoder behind a context: the packet writer and picture reader threads, writing
//! a picture as NV12 into a committed dma-buf, and choosing the next frame `decode_get_frame`
//! returns (info change, picture, EOS) under MPP's buffer and reference rules.

use std::io::{BufReader, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use super::*;

/// The writer thread: packets to ffmpeg's stdin until the channel closes (EOS or destroy).
pub(super) fn write_packets(mut stdin: std::process::ChildStdin, rx: mpsc::Receiver<Vec<u8>>) {
    for p in rx {
        if stdin.write_all(&p).is_err() {
            break;
        }
    }
}

/// The reader thread: one I420 picture at a time from ffmpeg's raw output, its size from
/// `sizes` (showinfo's line for it, sent by the stderr reader), at most [`RAW_AHEAD`] ahead
/// of the caller.
pub(super) fn read_frames(
    stdout: std::process::ChildStdout,
    sizes: mpsc::Receiver<(u32, u32)>,
    shared: Arc<Shared>,
    errors: JoinHandle<String>,
) {
    let mut r = BufReader::new(stdout);
    let result = (|| -> Result<(), String> {
        let mut first = true;
        loop {
            {
                let mut st = lock(&shared.st);
                while st.raw.len() >= RAW_AHEAD && !st.destroyed {
                    st = shared.cv.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                if st.destroyed {
                    return Ok(());
                }
            }
            // The size line comes before the picture's bytes (the filter runs before the
            // encoder); no line: ffmpeg is done.
            let Ok((w, h)) = sizes.recv() else {
                return if first { Err("no-output".into()) } else { Ok(()) };
            };
            first = false;
            let frame_bytes = (w * h + 2 * w.div_ceil(2) * h.div_ceil(2)) as usize;
            let mut pic = vec![0u8; frame_bytes];
            r.read_exact(&mut pic).map_err(|e| format!("short-picture:{e}"))?;
            let mut st = lock(&shared.st);
            st.raw.push_back(((w, h), pic));
            shared.cv.notify_all();
        }
    })();
    // ffmpeg has closed its stdout: it is exiting (or killed by mpp_destroy), and its stderr
    // thread ends with it.
    let errors = errors.join().unwrap_or_default();
    let mut st = lock(&shared.st);
    if let Err(e) = result {
        st.decoder_error = Some(format!("{e} ffmpeg={errors}"));
    }
    st.reader_done = true;
    shared.cv.notify_all();
}

/// Whether `b`'s fd still refers to the inode committed (MPP keeps EXT_DMA fd numbers as
/// given: a closed or reused fd number is the user's bug); else what it refers to now (an
/// inode number or the fstat error).
pub(super) fn still_committed(b: &Buffer) -> Result<(), String> {
    match inode(b.fd) {
        Ok(ino) if ino == b.inode => Ok(()),
        Ok(ino) => Err(ino.1.to_string()),
        Err(e) => Err(e),
    }
}

/// Writes one I420 picture (`w` x `h`) into `b` as NV12 at `hor` x `ver`.
pub(super) fn write_nv12(b: &Buffer, pic: &[u8], w: u32, h: u32, hor: u32, ver: u32) -> Result<(), String> {
    let (w, h, hor, ver) = (w as usize, h as usize, hor as usize, ver as usize);
    let need = hor * ver * 3 / 2;
    if b.size < need {
        return Err(format!("buffer-too-small size={} need={need}", b.size));
    }
    // SAFETY: a fresh shared mapping of `b.size` bytes of the committed fd (checked alive by
    // the caller); unmapped below.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), b.size, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, b.fd, 0)
    };
    if p == libc::MAP_FAILED {
        return Err(format!("mmap-failed:{}", std::io::Error::last_os_error().to_string().replace(' ', "_")));
    }
    let sync = |flags: u64| {
        let s = [flags];
        // SAFETY: DMA_BUF_IOCTL_SYNC reads one u64; memfds answer ENOTTY, ignored.
        unsafe { libc::ioctl(b.fd, DMA_BUF_IOCTL_SYNC, s.as_ptr()) };
    };
    sync(DMA_BUF_SYNC_WRITE);
    // SAFETY: the mapping is `b.size` >= `need` bytes, writable, and nothing else in this
    // process aliases it during the copy.
    let dst = unsafe { std::slice::from_raw_parts_mut(p as *mut u8, b.size) };
    let (cw, ch) = (w.div_ceil(2), h.div_ceil(2));
    let (y, rest) = pic.split_at(w * h);
    let (u, v) = rest.split_at(cw * ch);
    for row in 0..h {
        dst[row * hor..row * hor + w].copy_from_slice(&y[row * w..row * w + w]);
    }
    let uv = &mut dst[hor * ver..];
    for row in 0..ch {
        for x in 0..cw {
            uv[row * hor + 2 * x] = u[row * cw + x];
            uv[row * hor + 2 * x + 1] = v[row * cw + x];
        }
    }
    sync(DMA_BUF_SYNC_WRITE | DMA_BUF_SYNC_END);
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(p, b.size) };
    Ok(())
}

/// Lets go of the decoder's reference pictures (a DPB flush).
pub(super) fn drop_refs(st: &mut State) {
    for b in st.refs.drain(..) {
        b.refs.store(0, Ordering::SeqCst);
    }
}

pub(super) enum Step {
    Frame(Frame),
    Wait,
}

/// One attempt at producing a frame, under the context's lock.
pub(super) fn next_frame(c: &Ctx, st: &mut State) -> Step {
    let new_frame = |st: &State, seq: u64| {
        Frame { pts: seq as i64, ..Frame::empty(c.id, seq, Arc::downgrade(&c.shared)) }.sized(st.size)
    };
    // The next picture has another size (or is the first): an info change first, and no
    // picture until the caller says it is ready again (MPP_DEC_SET_INFO_CHANGE_READY).
    if let Some(&(size, _)) = st.raw.front() {
        if st.size != Some(size) {
            st.size = Some(size);
            st.info_change_sent = false;
            st.ready = false;
        }
    }
    if let (Some(_), false) = (st.size, st.info_change_sent) {
        st.info_change_sent = true;
        let mut f = new_frame(st, 0);
        f.info_change = 1;
        return Step::Frame(f);
    }
    if st.info_change_sent && st.ready && !st.raw.is_empty() {
        // After the EOS packet, whether this is the last picture is known only once the reader
        // has either another picture or ffmpeg's end of output.
        if st.eos_put && !st.reader_done && st.raw.len() == 1 {
            return Step::Wait;
        }
        let last = st.eos_put && st.reader_done && st.raw.len() == 1;
        let Some(g) = st.group.clone() else { return Step::Wait };
        let bufs = lock(&g.buffers).clone();
        let (w, h) = st.size.expect("info change sent");
        let (hor, ver) = (align16(w), align16(h));
        let n = bufs.len();
        for k in 0..n {
            let i = (st.next_buffer + k) % n;
            let b = &bufs[i];
            if !b.unused() || b.dead.load(Ordering::SeqCst) > 0 {
                continue;
            }
            if let Err(now) = still_committed(b) {
                b.dead.store(1, Ordering::SeqCst);
                violation(
                    "buffer-fd-not-committed-inode",
                    format!(
                        "ctx={} group={} index={} fd={} committed_ino={} now={now}",
                        c.id, b.group, b.index, b.fd, b.inode.1
                    ),
                );
                continue;
            }
            let (_, pic) = st.raw.front().expect("not empty");
            if let Err(e) = write_nv12(b, pic, w, h, hor, ver) {
                b.dead.store(1, Ordering::SeqCst);
                violation("buffer-unwritable", format!("ctx={} index={} fd={} {e}", c.id, b.index, b.fd));
                continue;
            }
            st.raw.pop_front();
            c.shared.cv.notify_all();
            b.holders.fetch_add(1, Ordering::SeqCst);
            // The new picture becomes a reference; the oldest beyond `max_refs` is let go.
            b.refs.store(1, Ordering::SeqCst);
            st.refs.push_back(Arc::clone(b));
            while st.refs.len() > st.max_refs {
                let old = st.refs.pop_front().expect("not empty");
                old.refs.store(0, Ordering::SeqCst);
            }
            st.next_buffer = i + 1;
            st.frames_out += 1;
            let mut f = new_frame(st, st.frames_out);
            f.buffer = Some(Arc::clone(b));
            // As MPP: the last picture carries eos=1 (and its buffer); an empty EOS frame follows.
            f.eos = u32::from(last);
            return Step::Frame(f);
        }
        let held_by_frames = bufs.iter().filter(|b| b.holders.load(Ordering::SeqCst) > 0).count();
        log(format!("decode_get_frame ctx={} frame=null reason=no-free-buffer buffers={n} references={} held_by_frames={held_by_frames} pending={}", c.id, st.refs.len(), st.raw.len()));
        return Step::Wait;
    }
    if st.reader_done && st.raw.is_empty() && !st.eos_sent && (st.eos_put || st.decoder_error.is_some()) {
        st.eos_sent = true;
        drop_refs(st);
        if let Some(e) = &st.decoder_error {
            // Real MPP gives no frame at all for a stream its parser cannot read (not even an
            // EOS frame): nor does the fake. It says why, once.
            log(format!("decode_get_frame ctx={} frame=null decoder-error={e}", c.id));
            return Step::Wait;
        }
        let mut f = new_frame(st, st.frames_out + 1);
        f.eos = 1;
        return Step::Frame(f);
    }
    Step::Wait
}

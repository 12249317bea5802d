//! Frames: the registry of decoded and user frames, their getters, the setters an encoder's
//! user frames need, `mpp_frame_get_buffer` and `mpp_frame_deinit`.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use super::*;

// ---------------------------------------------------------------------------------------
// Frames.

#[derive(Clone)]
pub(super) struct Frame {
    pub(super) ctx: u64,
    pub(super) seq: u64,
    pub(super) width: u32,
    pub(super) height: u32,
    pub(super) hor_stride: u32,
    pub(super) ver_stride: u32,
    pub(super) fmt: u32,
    pub(super) info_change: u32,
    pub(super) eos: u32,
    pub(super) errinfo: u32,
    pub(super) pts: i64,
    pub(super) buf_size: usize,
    pub(super) buffer: Option<Arc<Buffer>>,
    /// The buffer a user frame (`mpp_frame_init`, the task API) was given with
    /// `mpp_frame_set_buffer`: one reference, put when replaced or at deinit.
    pub(super) attached: Option<Arc<Buffer>>,
    pub(super) notify: Weak<Shared>,
}

pub(super) static FRAMES: LazyLock<Mutex<HashMap<usize, Box<Frame>>>> = LazyLock::new(Default::default);

fn frame_field<R: std::fmt::Display>(name: &str, f: Opaque, get: impl FnOnce(&Frame) -> R, none: R) -> R {
    let (v, seq) = match lock(&FRAMES).get(&(f as usize)) {
        Some(fr) => (get(fr), fr.seq.to_string()),
        None => (none, "unknown".into()),
    };
    log(format!("{name} frame={seq} value={v}"));
    v
}

macro_rules! frame_getter {
    ($name:ident, $ty:ty, $get:expr, $none:expr) => {
        #[doc = concat!("`", stringify!($name), "(const MppFrame frame)` (mpp_frame.h).")]
        ///
        /// # Safety
        /// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
        /// handles are looked up in the fake's registries, never dereferenced.
        #[no_mangle]
        pub unsafe extern "C" fn $name(f: Opaque) -> $ty {
            frame_field(stringify!($name), f, $get, $none)
        }
    };
}

frame_getter!(mpp_frame_get_width, u32, |f| f.width, 0);
frame_getter!(mpp_frame_get_height, u32, |f| f.height, 0);
frame_getter!(mpp_frame_get_hor_stride, u32, |f| f.hor_stride, 0);
frame_getter!(mpp_frame_get_ver_stride, u32, |f| f.ver_stride, 0);
frame_getter!(mpp_frame_get_fmt, u32, |f| f.fmt, 0);
frame_getter!(mpp_frame_get_info_change, u32, |f| f.info_change, 0);
frame_getter!(mpp_frame_get_eos, u32, |f| f.eos, 0);
frame_getter!(mpp_frame_get_errinfo, u32, |f| f.errinfo, 0);
frame_getter!(mpp_frame_get_discard, u32, |_| 0, 0);
frame_getter!(mpp_frame_get_pts, i64, |f| f.pts, 0);
frame_getter!(mpp_frame_get_buf_size, usize, |f| f.buf_size, 0);

macro_rules! frame_setter {
    ($name:ident, $ty:ty, $field:ident) => {
        #[doc = concat!("`void ", stringify!($name), "(MppFrame frame, ...)` (mpp_frame.h).")]
        ///
        /// # Safety
        /// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
        /// handles are looked up in the fake's registries, never dereferenced.
        #[no_mangle]
        pub unsafe extern "C" fn $name(f: Opaque, v: $ty) {
            let seq = lock(&FRAMES).get_mut(&(f as usize)).map(|fr| {
                fr.$field = v;
                fr.seq
            });
            match seq {
                Some(seq) => log(format!("{} frame={seq} value={v}", stringify!($name))),
                None => violation("frame-set-unknown-frame", format!("call={}", stringify!($name))),
            }
        }
    };
}

frame_setter!(mpp_frame_set_width, u32, width);
frame_setter!(mpp_frame_set_height, u32, height);
frame_setter!(mpp_frame_set_hor_stride, u32, hor_stride);
frame_setter!(mpp_frame_set_ver_stride, u32, ver_stride);
frame_setter!(mpp_frame_set_fmt, u32, fmt);
frame_setter!(mpp_frame_set_eos, u32, eos);
frame_setter!(mpp_frame_set_pts, i64, pts);

/// `MppBuffer mpp_frame_get_buffer(const MppFrame frame)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_frame_get_buffer(f: Opaque) -> Opaque {
    let (p, what) = match lock(&FRAMES).get(&(f as usize)) {
        Some(fr) => {
            let b = fr.buffer.as_ref().or(fr.attached.as_ref());
            (
                b.map_or(std::ptr::null_mut(), |b| Arc::as_ptr(b) as Opaque),
                format!("frame={} index={}", fr.seq, b.map_or(-1, |b| b.index)),
            )
        }
        None => (std::ptr::null_mut(), "frame=unknown".into()),
    };
    log(format!("mpp_frame_get_buffer {what}"));
    p
}

/// `MPP_RET mpp_frame_deinit(MppFrame *frame)`: frees the frame; its buffer may be reused.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_frame_deinit(p: *mut Opaque) -> MppRet {
    if p.is_null() {
        return MPP_ERR_NULL_PTR;
    }
    // SAFETY: non-null pointer to the caller's handle.
    let h = unsafe { *p };
    if task::on_hardware(h as usize) {
        violation("frame-freed-while-hardware-writes", "at=mpp_frame_deinit".into());
    }
    let Some(fr) = lock(&FRAMES).remove(&(h as usize)) else {
        violation("frame-deinit-unknown", "frame=unknown".into());
        return MPP_ERR_NULL_PTR;
    };
    if let Some(b) = &fr.buffer {
        b.holders.fetch_sub(1, Ordering::SeqCst);
    }
    if let Some(b) = &fr.attached {
        task::put(b, "mpp_frame_deinit");
    }
    log(format!(
        "mpp_frame_deinit ctx={} frame={} index={}",
        fr.ctx,
        fr.seq,
        fr.buffer.as_ref().map_or(-1, |b| b.index)
    ));
    if let Some(s) = fr.notify.upgrade() {
        let _g = lock(&s.st);
        s.cv.notify_all();
    }
    // SAFETY: as above.
    unsafe { *p = std::ptr::null_mut() };
    MPP_OK
}

impl Frame {
    /// A frame of context `ctx` (0: a user frame of `mpp_frame_init`) with no picture yet.
    pub(super) fn empty(ctx: u64, seq: u64, notify: Weak<Shared>) -> Frame {
        Frame {
            ctx,
            seq,
            width: 0,
            height: 0,
            hor_stride: 0,
            ver_stride: 0,
            fmt: MPP_FMT_YUV420SP,
            info_change: 0,
            eos: 0,
            errinfo: 0,
            pts: 0,
            buf_size: 0,
            buffer: None,
            attached: None,
            notify,
        }
    }

    pub(super) fn sized(mut self, size: Option<(u32, u32)>) -> Frame {
        if let Some((w, h)) = size {
            (self.width, self.height, self.hor_stride, self.ver_stride) = (w, h, align16(w), align16(h));
            self.buf_size = (align16(w) * align16(h) * 3 / 2) as usize;
        }
        self
    }
}

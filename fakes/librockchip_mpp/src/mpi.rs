//! The [`MppApi`] table's entries: `decode_put_packet`, `decode_get_frame`, `control` (the
//! encoder's commands go to [`encode`]), `reset`, and the stub every other entry points to
//! (`encode_put_frame`/`encode_get_packet` are in [`encode`]).

use std::ffi::c_int;
use std::time::{Duration, Instant};

use super::*;

/// `MppApi::decode_put_packet`: copies the packet into the input queue, or
/// `MPP_ERR_BUFFER_FULL` when the queue is full.
pub(super) unsafe extern "C" fn mpi_decode_put_packet(h: Opaque, pkt: Opaque) -> MppRet {
    let Some(c) = ctx(h) else {
        log(format!("decode_put_packet ret={MPP_ERR_NULL_PTR} reason=unknown-ctx"));
        return MPP_ERR_NULL_PTR;
    };
    let mut st = lock(&c.shared.st);
    if !st.inited {
        log(format!("decode_put_packet ctx={} ret={MPP_ERR_INIT}", c.id));
        return MPP_ERR_INIT;
    }
    let mut packets = lock(&PACKETS);
    let Some(p) = packets.get_mut(&(pkt as usize)) else {
        log(format!("decode_put_packet ctx={} ret={MPP_ERR_NULL_PTR} reason=unknown-packet", c.id));
        return MPP_ERR_NULL_PTR;
    };
    if st.coding == CODING_MJPEG {
        // Real MPP: the MJPEG decoder's single input task waits for a packet backed by an
        // MppBuffer with an output frame (KEY_OUTPUT_FRAME meta); a plain packet never fills
        // it, so decode_put_packet reports a full queue forever.
        log(format!(
            "decode_put_packet ctx={} size={} ret={MPP_ERR_BUFFER_FULL} reason=mjpeg-needs-task-api",
            c.id, p.length
        ));
        return MPP_ERR_BUFFER_FULL;
    }
    if st.eos_put {
        violation("packet-after-eos", format!("ctx={} size={}", c.id, p.length));
    }
    if st.input.len() >= st.input_slots && !p.eos {
        log(format!(
            "decode_put_packet ctx={} size={} queued={} ret={MPP_ERR_BUFFER_FULL}",
            c.id,
            p.length,
            st.input.len()
        ));
        return MPP_ERR_BUFFER_FULL;
    }
    let bytes = if p.length == 0 {
        Vec::new()
    } else {
        // SAFETY: mpp_packet_init's caller keeps `size` bytes at `data` alive while the
        // packet lives; `length` <= `size`.
        unsafe { std::slice::from_raw_parts(p.data.add(p.size - p.length), p.length) }.to_vec()
    };
    let n = bytes.len();
    if !bytes.is_empty() {
        st.input.push_back(bytes);
    }
    st.eos_put |= p.eos;
    p.length = 0;
    log(format!(
        "decode_put_packet ctx={} size={n} pts={} eos={} queued={} ret=0",
        c.id,
        p.pts,
        u8::from(p.eos),
        st.input.len()
    ));
    c.shared.cv.notify_all();
    MPP_OK
}

/// `MppApi::decode_get_frame`: hands the queued packets to the decoder, then returns the
/// info-change frame, a picture, the EOS frame, or NULL (after the output timeout:
/// `MPP_ERR_TIMEOUT`).
pub(super) unsafe extern "C" fn mpi_decode_get_frame(h: Opaque, out: *mut Opaque) -> MppRet {
    if out.is_null() {
        return MPP_ERR_NULL_PTR;
    }
    // SAFETY: non-null out-pointer.
    unsafe { *out = std::ptr::null_mut() };
    let Some(c) = ctx(h) else {
        log(format!("decode_get_frame ret={MPP_ERR_NULL_PTR} reason=unknown-ctx"));
        return MPP_ERR_NULL_PTR;
    };
    let mut st = lock(&c.shared.st);
    if !st.inited {
        log(format!("decode_get_frame ctx={} ret={MPP_ERR_INIT}", c.id));
        return MPP_ERR_INIT;
    }
    while let Some(p) = st.input.pop_front() {
        if let Some(w) = &st.writer {
            let _ = w.send(p);
        }
    }
    if st.eos_put {
        // Closing the channel closes ffmpeg's stdin once the writer has sent everything.
        st.writer = None;
    }
    let deadline = (st.out_timeout > 0).then(|| Instant::now() + Duration::from_millis(st.out_timeout as u64));
    loop {
        match next_frame(&c, &mut st) {
            Step::Frame(f) => {
                log(format!(
                    "decode_get_frame ctx={} frame={} info_change={} eos={} errinfo={} width={} height={} hor_stride={} ver_stride={} index={} ret=0",
                    c.id,
                    f.seq,
                    f.info_change,
                    f.eos,
                    f.errinfo,
                    f.width,
                    f.height,
                    f.hor_stride,
                    f.ver_stride,
                    f.buffer.as_ref().map_or(-1, |b| b.index)
                ));
                let b = Box::new(f);
                let handle = &*b as *const Frame as Opaque;
                lock(&FRAMES).insert(handle as usize, b);
                // SAFETY: non-null out-pointer.
                unsafe { *out = handle };
                return MPP_OK;
            }
            Step::Wait => {}
        }
        st = match (st.out_timeout, deadline) {
            (0, _) => break,
            (_, Some(d)) => {
                let now = Instant::now();
                if now >= d {
                    log(format!("decode_get_frame ctx={} frame=null ret={MPP_ERR_TIMEOUT}", c.id));
                    return MPP_ERR_TIMEOUT;
                }
                c.shared.cv.wait_timeout(st, d - now).unwrap_or_else(|e| e.into_inner()).0
            }
            (_, None) => c.shared.cv.wait(st).unwrap_or_else(|e| e.into_inner()),
        };
    }
    log(format!("decode_get_frame ctx={} frame=null ret=0", c.id));
    MPP_OK
}

fn cmd_name(cmd: c_int) -> &'static str {
    match cmd {
        MPP_SET_INPUT_TIMEOUT => "MPP_SET_INPUT_TIMEOUT",
        MPP_SET_OUTPUT_TIMEOUT => "MPP_SET_OUTPUT_TIMEOUT",
        MPP_DEC_SET_EXT_BUF_GROUP => "MPP_DEC_SET_EXT_BUF_GROUP",
        MPP_DEC_SET_INFO_CHANGE_READY => "MPP_DEC_SET_INFO_CHANGE_READY",
        MPP_DEC_SET_PARSER_SPLIT_MODE => "MPP_DEC_SET_PARSER_SPLIT_MODE",
        MPP_DEC_SET_PARSER_FAST_MODE => "MPP_DEC_SET_PARSER_FAST_MODE",
        MPP_DEC_SET_OUTPUT_FORMAT => "MPP_DEC_SET_OUTPUT_FORMAT",
        MPP_DEC_SET_DISABLE_ERROR => "MPP_DEC_SET_DISABLE_ERROR",
        MPP_DEC_SET_IMMEDIATE_OUT => "MPP_DEC_SET_IMMEDIATE_OUT",
        MPP_ENC_SET_CFG => "MPP_ENC_SET_CFG",
        MPP_ENC_GET_CFG => "MPP_ENC_GET_CFG",
        MPP_ENC_SET_IDR_FRAME => "MPP_ENC_SET_IDR_FRAME",
        MPP_ENC_SET_HEADER_MODE => "MPP_ENC_SET_HEADER_MODE",
        _ => "unknown",
    }
}

/// `MppApi::control`.
pub(super) unsafe extern "C" fn mpi_control(h: Opaque, cmd: c_int, param: Opaque) -> MppRet {
    let Some(c) = ctx(h) else {
        log(format!("control cmd={cmd:#x} ret={MPP_ERR_NULL_PTR} reason=unknown-ctx"));
        return MPP_ERR_NULL_PTR;
    };
    let mut st = lock(&c.shared.st);
    let name = cmd_name(cmd);
    let read_u32 = |p: Opaque| {
        if p.is_null() {
            0
        } else {
            // SAFETY: the commands that take a value take a pointer to a 4-byte integer
            // (RK_U32, or MppPollType read from the RK_S64 rk_mpi_cmd.h documents).
            unsafe { *(p as *const u32) }
        }
    };
    let (ret, detail) = match cmd {
        MPP_DEC_SET_PARSER_SPLIT_MODE => {
            if st.inited {
                violation("split-mode-after-init", format!("ctx={}", c.id));
            }
            st.split = read_u32(param);
            (MPP_OK, format!("value={}", st.split))
        }
        MPP_SET_OUTPUT_TIMEOUT | MPP_SET_INPUT_TIMEOUT => {
            let t = read_u32(param) as i32;
            if !(-1..=MPP_POLL_MAX).contains(&t) {
                (MPP_ERR_VALUE, format!("value={t}"))
            } else {
                if cmd == MPP_SET_OUTPUT_TIMEOUT {
                    st.out_timeout = t;
                }
                (MPP_OK, format!("value={t}"))
            }
        }
        MPP_DEC_SET_EXT_BUF_GROUP => {
            if !st.inited {
                // Real MPP (mpp.cpp): before mpp_init the decoder does not exist; MPP_NOK.
                violation("ext-buf-group-before-init", format!("ctx={}", c.id));
                (MPP_NOK, "reason=before-init".into())
            } else if param.is_null() {
                st.group = None;
                (MPP_OK, "group=internal".into())
            } else {
                match group(param) {
                    Some(g)
                        if matches!(
                            g.type_,
                            MPP_BUFFER_TYPE_ION
                                | MPP_BUFFER_TYPE_EXT_DMA
                                | MPP_BUFFER_TYPE_DRM
                                | MPP_BUFFER_TYPE_DMA_HEAP
                        ) && g.mode == MPP_BUFFER_EXTERNAL =>
                    {
                        let d = format!("group={} buffers={}", g.id, lock(&g.buffers).len());
                        st.group = Some(g);
                        (MPP_OK, d)
                    }
                    Some(g) => (MPP_ERR_VALUE, format!("group={} type={} mode={}", g.id, g.type_, g.mode)),
                    None => (MPP_ERR_NULL_PTR, "group=unknown".into()),
                }
            }
        }
        MPP_DEC_SET_INFO_CHANGE_READY => {
            if !st.info_change_sent {
                violation("info-change-ready-without-info-change", format!("ctx={}", c.id));
            }
            if st.group.is_none() {
                violation(
                    "info-change-ready-without-group",
                    format!("ctx={} (the fake has no internal buffers)", c.id),
                );
            }
            st.ready = st.info_change_sent && st.group.is_some();
            (MPP_OK, format!("ready={}", u8::from(st.ready)))
        }
        // The fake writes NV12 whatever is asked (as a chip that converts 4:2:2 JPEGs does);
        // it only checks that a YUV format is asked for.
        MPP_DEC_SET_OUTPUT_FORMAT => {
            let f = read_u32(param);
            if !st.inited {
                // Real MPP (mpp.cpp): no decoder before mpp_init to take it; MPP_NOK.
                violation("output-format-before-init", format!("ctx={}", c.id));
                (MPP_NOK, format!("value={f} reason=before-init"))
            } else {
                (if f < 0x10000 { MPP_OK } else { MPP_ERR_VALUE }, format!("value={f}"))
            }
        }
        MPP_DEC_SET_PARSER_FAST_MODE | MPP_DEC_SET_DISABLE_ERROR | MPP_DEC_SET_IMMEDIATE_OUT => {
            (MPP_OK, format!("value={}", read_u32(param)))
        }
        MPP_ENC_SET_CFG | MPP_ENC_GET_CFG | MPP_ENC_SET_IDR_FRAME | MPP_ENC_SET_HEADER_MODE => {
            encode::control(c.id, cmd, param)
        }
        _ => (MPP_NOK, "unsupported=1".into()),
    };
    log(format!("control ctx={} cmd={name} ({cmd:#x}) {detail} ret={ret}", c.id));
    c.shared.cv.notify_all();
    ret
}

/// `MppApi::reset`: drops the queued packets, the pictures not yet returned and the
/// references (the ffmpeg child goes on: the fake does not restart its decoder).
pub(super) unsafe extern "C" fn mpi_reset(h: Opaque) -> MppRet {
    let Some(c) = ctx(h) else { return MPP_ERR_NULL_PTR };
    let mut st = lock(&c.shared.st);
    let (p, r) = (st.input.len(), st.raw.len());
    st.input.clear();
    st.raw.clear();
    drop_refs(&mut st);
    c.shared.cv.notify_all();
    log(format!("reset ctx={} dropped_packets={p} dropped_pictures={r} ret=0", c.id));
    MPP_OK
}

/// The unimplemented `MppApi` entries.
pub(super) unsafe extern "C" fn unsupported() -> MppRet {
    log(format!("unsupported-mpi-call ret={MPP_NOK}"));
    MPP_NOK
}

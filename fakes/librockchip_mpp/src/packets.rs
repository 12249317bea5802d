//! Packets: `mpp_packet_init` / `deinit` and their accessors, and the registry that hands out
//! handles.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, LazyLock, Mutex};

use super::*;

// ---------------------------------------------------------------------------------------
// Packets.

pub(super) struct Packet {
    pub(super) data: *const u8,
    pub(super) size: usize,
    pub(super) length: usize,
    pub(super) pts: i64,
    pub(super) eos: bool,
    /// The buffer of `mpp_packet_init_with_buffer` (one reference, put at deinit).
    pub(super) buffer: Option<Arc<Buffer>>,
}

// SAFETY: the registry only stores the caller's pointer; it is read on the caller's thread
// inside decode_put_packet.
unsafe impl Send for Packet {}

pub(super) static PACKETS: LazyLock<Mutex<HashMap<usize, Box<Packet>>>> = LazyLock::new(Default::default);

/// `MPP_RET mpp_packet_init(MppPacket *packet, void *data, size_t size)`: wraps the caller's
/// bytes (not copied).
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_init(out: *mut Opaque, data: *mut c_void, size: usize) -> MppRet {
    if out.is_null() || (data.is_null() && size > 0) {
        log(format!("mpp_packet_init size={size} ret={MPP_ERR_NULL_PTR}"));
        return MPP_ERR_NULL_PTR;
    }
    hand_out(
        &PACKETS,
        Box::new(Packet { data: data as *const u8, size, length: size, pts: 0, eos: false, buffer: None }),
        out,
    );
    log(format!("mpp_packet_init size={size} ret=0"));
    MPP_OK
}

/// `MPP_RET mpp_packet_deinit(MppPacket *packet)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_deinit(p: *mut Opaque) -> MppRet {
    if p.is_null() {
        return MPP_ERR_NULL_PTR;
    }
    // SAFETY: non-null pointer to the caller's handle.
    let h = unsafe { *p };
    if task::on_hardware(h as usize) {
        violation("packet-freed-while-hardware-reads", "at=mpp_packet_deinit".into());
    }
    let found = lock(&PACKETS).remove(&(h as usize));
    if let Some(b) = found.as_ref().and_then(|p| p.buffer.as_ref()) {
        task::put(b, "mpp_packet_deinit");
    }
    let found = found.is_some();
    log(format!("mpp_packet_deinit known={}", u8::from(found)));
    // SAFETY: as above.
    unsafe { *p = std::ptr::null_mut() };
    if found {
        MPP_OK
    } else {
        MPP_ERR_NULL_PTR
    }
}

/// Keeps `v` in registry `reg` under its address, which becomes the caller's handle
/// (`*out`, when `out` is not null).
pub(super) fn hand_out<T>(reg: &Mutex<HashMap<usize, Box<T>>>, v: Box<T>, out: *mut Opaque) {
    let handle = &*v as *const T as Opaque;
    lock(reg).insert(handle as usize, v);
    if !out.is_null() {
        // SAFETY: a non-null out-pointer from the caller of an MPP function that writes one.
        unsafe { *out = handle };
    }
}

pub(super) fn with_packet<R>(h: Opaque, f: impl FnOnce(&mut Packet) -> R) -> Option<R> {
    lock(&PACKETS).get_mut(&(h as usize)).map(|p| f(p))
}

/// `MPP_RET mpp_packet_set_eos(MppPacket packet)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_set_eos(p: Opaque) -> MppRet {
    let ok = with_packet(p, |p| p.eos = true).is_some();
    log(format!("mpp_packet_set_eos known={}", u8::from(ok)));
    if ok {
        MPP_OK
    } else {
        MPP_ERR_NULL_PTR
    }
}

/// `void mpp_packet_set_pts(MppPacket packet, RK_S64 pts)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_set_pts(p: Opaque, pts: i64) {
    let ok = with_packet(p, |p| p.pts = pts).is_some();
    log(format!("mpp_packet_set_pts pts={pts} known={}", u8::from(ok)));
}

/// `size_t mpp_packet_get_length(const MppPacket packet)`: 0 once MPP took the packet.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_get_length(p: Opaque) -> usize {
    let n = with_packet(p, |p| p.length).unwrap_or(0);
    log(format!("mpp_packet_get_length length={n}"));
    n
}

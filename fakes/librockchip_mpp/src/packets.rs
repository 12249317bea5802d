//! Packets: `mpp_packet_init` / `deinit` and their accessors, the registry that hands out
//! handles, and packet meta (`mpp_packet_get_meta`, `mpp_meta_get_s32`: an encoded packet's
//! `KEY_OUTPUT_INTRA`).

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
    /// The bytes of an encoder's packet (`data` points into them); empty for the caller's.
    pub(super) owned: Vec<u8>,
    /// The packet's meta handle in [`METAS`] (0: none yet; `mpp_packet_get_meta` makes one,
    /// as MPP does), freed with the packet.
    pub(super) meta: usize,
}

/// A packet's meta data (`MppMeta`): the `RK_S32` values by key (`KEY_OUTPUT_INTRA`, ...).
#[derive(Default)]
pub(super) struct Meta {
    pub(super) s32: HashMap<u32, i32>,
}

pub(super) static METAS: LazyLock<Mutex<HashMap<usize, Box<Meta>>>> = LazyLock::new(Default::default);

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
        Box::new(Packet {
            data: data as *const u8,
            size,
            length: size,
            pts: 0,
            eos: false,
            buffer: None,
            owned: Vec::new(),
            meta: 0,
        }),
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
    if let Some(m) = found.as_ref().map(|p| p.meta).filter(|m| *m != 0) {
        lock(&METAS).remove(&m);
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

/// `void *mpp_packet_get_pos(const MppPacket packet)`: where the bytes not yet taken start
/// (`data + size - length`).
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_get_pos(p: Opaque) -> *mut c_void {
    let pos = with_packet(p, |p| p.data.wrapping_add(p.size - p.length) as *mut c_void);
    log(format!("mpp_packet_get_pos known={}", u8::from(pos.is_some())));
    pos.unwrap_or(std::ptr::null_mut())
}

/// `RK_S64 mpp_packet_get_pts(const MppPacket packet)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_get_pts(p: Opaque) -> i64 {
    let pts = with_packet(p, |p| p.pts);
    log(format!("mpp_packet_get_pts pts={} known={}", pts.unwrap_or(0), u8::from(pts.is_some())));
    pts.unwrap_or(0)
}

/// `RK_U32 mpp_packet_get_eos(MppPacket packet)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_get_eos(p: Opaque) -> u32 {
    let eos = with_packet(p, |p| u32::from(p.eos)).unwrap_or(0);
    log(format!("mpp_packet_get_eos eos={eos}"));
    eos
}

/// `RK_S32 mpp_packet_has_meta(const MppPacket packet)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_has_meta(p: Opaque) -> i32 {
    let has = with_packet(p, |p| i32::from(p.meta != 0)).unwrap_or(0);
    log(format!("mpp_packet_has_meta value={has}"));
    has
}

/// `MppMeta mpp_packet_get_meta(const MppPacket packet)`: the packet's meta, made empty on
/// first use (as MPP's `mpp_packet_get_meta`).
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_packet_get_meta(p: Opaque) -> Opaque {
    let meta = with_packet(p, |p| {
        if p.meta == 0 {
            p.meta = new_meta(HashMap::new());
        }
        p.meta
    });
    log(format!("mpp_packet_get_meta known={}", u8::from(meta.is_some())));
    meta.unwrap_or(0) as Opaque
}

/// A meta of `s32` values in [`METAS`]: its handle.
pub(super) fn new_meta(s32: HashMap<u32, i32>) -> usize {
    let m = Box::new(Meta { s32 });
    let h = &*m as *const Meta as usize;
    lock(&METAS).insert(h, m);
    h
}

/// `MPP_RET mpp_meta_get_s32(MppMeta meta, MppMetaKey key, RK_S32 *val)`: `MPP_NOK` when
/// the key is not set.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_meta_get_s32(meta: Opaque, key: u32, out: *mut i32) -> MppRet {
    let v = lock(&METAS).get(&(meta as usize)).map(|m| m.s32.get(&key).copied());
    let ret = match v {
        None => {
            violation("meta-unknown", format!("key={key:#x}"));
            MPP_ERR_NULL_PTR
        }
        Some(None) => MPP_NOK,
        Some(Some(_)) if out.is_null() => MPP_ERR_NULL_PTR,
        Some(Some(v)) => {
            // SAFETY: a non-null out-pointer from the caller.
            unsafe { *out = v };
            MPP_OK
        }
    };
    log(format!("mpp_meta_get_s32 key={key:#x} value={} ret={ret}", v.flatten().unwrap_or(0)));
    ret
}

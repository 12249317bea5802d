//! Buffers and buffer groups: `mpp_buffer_group_get`, committing (importing) external dma-bufs,
//! the buffer accessors, and clearing and putting a group, with the rules MPP keeps on them.

use std::collections::HashMap;
use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use super::*;

// ---------------------------------------------------------------------------------------
// Buffers and groups.

/// One committed buffer. Its handle (`MppBuffer`) is the address of this value, which the
/// [`BUFFERS`] registry keeps alive for the life of the process.
pub(super) struct Buffer {
    pub(super) group: u64,
    pub(super) index: c_int,
    pub(super) fd: c_int,
    pub(super) size: usize,
    pub(super) inode: (u64, u64),
    /// Frames holding this buffer (not yet `mpp_frame_deinit`ed).
    pub(super) holders: AtomicU32,
    /// 1 while a decoder keeps this buffer as a reference picture.
    pub(super) refs: AtomicU32,
    /// Set when the fd no longer refers to the committed inode: never written again.
    pub(super) dead: AtomicU32,
    /// References of an imported or internal-group buffer (`mpp_buffer_import`,
    /// `mpp_buffer_get`, frames and packets holding it); 0 for committed buffers.
    pub(super) refcount: AtomicU32,
    /// The CPU memory of an internal-group buffer (`libc::calloc`, freed at the last put),
    /// as an address; 0 for fd-backed buffers.
    pub(super) mem: usize,
}

pub(super) struct Group {
    pub(super) id: u64,
    pub(super) type_: c_int,
    pub(super) mode: c_int,
    pub(super) buffers: Mutex<Vec<Arc<Buffer>>>,
}

pub(super) static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static GROUPS: LazyLock<Mutex<HashMap<usize, Arc<Group>>>> = LazyLock::new(Default::default);
pub(super) static BUFFERS: LazyLock<Mutex<HashMap<usize, Arc<Buffer>>>> = LazyLock::new(Default::default);

pub(super) fn group(handle: Opaque) -> Option<Arc<Group>> {
    lock(&GROUPS).get(&(handle as usize)).cloned()
}

pub(super) fn buffer(handle: Opaque) -> Option<Arc<Buffer>> {
    lock(&BUFFERS).get(&(handle as usize)).cloned()
}

impl Buffer {
    /// Neither a frame nor a decoder reference holds it.
    pub(super) fn unused(&self) -> bool {
        self.holders.load(Ordering::SeqCst) == 0 && self.refs.load(Ordering::SeqCst) == 0
    }
}

pub(super) fn held(g: &Group) -> usize {
    lock(&g.buffers).iter().filter(|b| !b.unused()).count()
}

/// `MPP_RET mpp_buffer_group_get(MppBufferGroup *group, MppBufferType type, MppBufferMode
/// mode, const char *tag, const char *caller)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_group_get(
    out: *mut Opaque,
    type_: c_int,
    mode: c_int,
    tag: *const c_char,
    caller: *const c_char,
) -> MppRet {
    if out.is_null() {
        log(format!("mpp_buffer_group_get ret={MPP_ERR_NULL_PTR} reason=null-group-pointer"));
        return MPP_ERR_NULL_PTR;
    }
    let id = NEXT_ID.fetch_add(1, Ordering::SeqCst);
    let g = Arc::new(Group { id, type_: type_ & 0xffff, mode, buffers: Mutex::new(Vec::new()) });
    let handle = Arc::as_ptr(&g) as Opaque;
    lock(&GROUPS).insert(handle as usize, g);
    // SAFETY: non-null out-pointer from the caller.
    unsafe { *out = handle };
    log(format!(
        "mpp_buffer_group_get group={id} type={type_} mode={mode} tag={} caller={} ret=0",
        c_str(tag),
        c_str(caller)
    ));
    MPP_OK
}

/// `MPP_RET mpp_buffer_import_with_tag(MppBufferGroup group, MppBufferInfo *info, MppBuffer
/// *buffer, const char *tag, const char *caller)`: with `buffer` NULL this is
/// `mpp_buffer_commit`, the only form the fake implements.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_import_with_tag(
    grp: Opaque,
    info: *mut MppBufferInfo,
    out: *mut Opaque,
    tag: *const c_char,
    caller: *const c_char,
) -> MppRet {
    let who = format!("tag={} caller={}", c_str(tag), c_str(caller));
    if info.is_null() {
        log(format!("mpp_buffer_commit ret={MPP_ERR_NULL_PTR} reason=null-info {who}"));
        return MPP_ERR_NULL_PTR;
    }
    // SAFETY: non-null; the caller passes a valid MppBufferInfo.
    let info = unsafe { *info };
    if grp.is_null() && !out.is_null() {
        // mpp_buffer_import: a buffer of MPP's misc group, got (one reference).
        return task::import(&info, out, &who);
    }
    let Some(g) = group(grp) else {
        log(format!("mpp_buffer_commit ret={MPP_NOK} reason=unknown-group {who}"));
        return MPP_NOK;
    };
    if !out.is_null() {
        log(format!(
            "mpp_buffer_import group={} ret={MPP_NOK} reason=import-into-a-group-not-implemented-by-the-fake {who}",
            g.id
        ));
        return MPP_NOK;
    }
    if g.type_ != info.type_ || g.mode != MPP_BUFFER_EXTERNAL {
        log(format!("mpp_buffer_commit group={} ret={MPP_ERR_UNKNOW} reason=type-or-mode group_type={} info_type={} mode={} {who}", g.id, g.type_, info.type_, g.mode));
        return MPP_ERR_UNKNOW;
    }
    if info.fd < 0 || info.size == 0 || !info.ptr.is_null() {
        log(format!("mpp_buffer_commit group={} ret={MPP_ERR_VALUE} fd={} size={} {who}", g.id, info.fd, info.size));
        return MPP_ERR_VALUE;
    }
    let ino = match inode(info.fd) {
        Ok(i) => i,
        Err(e) => {
            violation("commit-bad-fd", format!("group={} fd={} error={e}", g.id, info.fd));
            return MPP_ERR_VALUE;
        }
    };
    let mut bufs = lock(&g.buffers);
    if bufs.iter().any(|b| b.inode == ino) {
        violation("committed-twice", format!("group={} fd={} ino={}", g.id, info.fd, ino.1));
    }
    let b = Arc::new(Buffer {
        group: g.id,
        index: info.index,
        fd: info.fd,
        size: info.size,
        inode: ino,
        holders: AtomicU32::new(0),
        refs: AtomicU32::new(0),
        dead: AtomicU32::new(0),
        refcount: AtomicU32::new(0),
        mem: 0,
    });
    lock(&BUFFERS).insert(Arc::as_ptr(&b) as usize, Arc::clone(&b));
    bufs.push(b);
    log(format!(
        "mpp_buffer_commit group={} index={} fd={} size={} ino={} ret=0 {who}",
        g.id, info.index, info.fd, info.size, ino.1
    ));
    MPP_OK
}

/// `int mpp_buffer_get_fd_with_caller(MppBuffer buffer, const char *caller)`: the committed fd.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_get_fd_with_caller(buf: Opaque, caller: *const c_char) -> c_int {
    let fd = buffer(buf).map_or(-1, |b| b.fd);
    log(format!("mpp_buffer_get_fd fd={fd} caller={}", c_str(caller)));
    fd
}

/// `int mpp_buffer_get_index_with_caller(MppBuffer buffer, const char *caller)`: the
/// committed `index`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_get_index_with_caller(buf: Opaque, caller: *const c_char) -> c_int {
    let index = buffer(buf).map_or(-1, |b| b.index);
    log(format!("mpp_buffer_get_index index={index} caller={}", c_str(caller)));
    index
}

/// `size_t mpp_buffer_get_size_with_caller(MppBuffer buffer, const char *caller)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_get_size_with_caller(buf: Opaque, caller: *const c_char) -> usize {
    let size = buffer(buf).map_or(0, |b| b.size);
    log(format!("mpp_buffer_get_size size={size} caller={}", c_str(caller)));
    size
}

/// `RK_S32 mpp_buffer_group_unused(MppBufferGroup group)`: buffers neither a frame nor a
/// decoder reference holds.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_group_unused(grp: Opaque) -> i32 {
    let Some(g) = group(grp) else {
        log("mpp_buffer_group_unused ret=-1 reason=unknown-group".into());
        return MPP_NOK;
    };
    let n = lock(&g.buffers).iter().filter(|b| b.unused()).count() as i32;
    log(format!("mpp_buffer_group_unused group={} unused={n}", g.id));
    n
}

/// `MPP_RET mpp_buffer_group_clear(MppBufferGroup group)`: forgets the committed buffers
/// nothing holds.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_group_clear(grp: Opaque) -> MppRet {
    let Some(g) = group(grp) else {
        log(format!("mpp_buffer_group_clear ret={MPP_NOK} reason=unknown-group"));
        return MPP_NOK;
    };
    let h = held(&g);
    if h > 0 {
        violation("group-clear-while-held", format!("group={} held={h}", g.id));
    }
    // The buffers frames still hold stay (as MPP frees them only when released).
    let mut bufs = lock(&g.buffers);
    let before = bufs.len();
    bufs.retain(|b| !b.unused());
    log(format!("mpp_buffer_group_clear group={} cleared={} held={h} ret=0", g.id, before - bufs.len()));
    MPP_OK
}

/// `MPP_RET mpp_buffer_group_put(MppBufferGroup group)`: destroys the group.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_buffer_group_put(grp: Opaque) -> MppRet {
    let Some(g) = lock(&GROUPS).remove(&(grp as usize)) else {
        log(format!("mpp_buffer_group_put ret={MPP_NOK} reason=unknown-group"));
        return MPP_NOK;
    };
    let h = held(&g);
    if h > 0 {
        violation("group-put-while-held", format!("group={} held={h}", g.id));
    }
    // An internal group's buffers still referenced (mpp_buffer_get without its put).
    let live = lock(&g.buffers).iter().filter(|b| b.mem != 0 && b.refcount.load(Ordering::SeqCst) > 0).count();
    // Every task-API buffer (imported or got) still referenced, in any group.
    let all_live = lock(&BUFFERS).values().filter(|b| b.refcount.load(Ordering::SeqCst) > 0).count();
    log(format!(
        "mpp_buffer_group_put group={} buffers={} held={h} live={live} all_live={all_live} ret=0",
        g.id,
        lock(&g.buffers).len()
    ));
    MPP_OK
}

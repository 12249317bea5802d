//! Zero-copy input: `rknn_create_mem_from_fd`, `rknn_destroy_mem` and `rknn_set_io_mem`
//! (binding a dma-buf as a context's input).

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::*;

fn inode(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: fstat fills a zeroed stat for a valid fd, or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    Some((st.st_ino, st.st_size as u64))
}

/// `rknn_tensor_mem* rknn_create_mem_from_fd(rknn_context, int32_t fd, void* virt, uint32_t size, int32_t offset)`.
///
/// # Safety
/// Plain values; `virt_addr` is recorded, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn rknn_create_mem_from_fd(
    context: RknnContext,
    fd: i32,
    virt_addr: *mut c_void,
    size: u32,
    offset: i32,
) -> *mut TensorMem {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let (ino, fsize) = inode(fd).unwrap_or((0, 0));
        let mut st = state();
        if !st.ctxs.contains_key(&context) || fd < 0 || offset < 0 || size == 0 {
            log(format!("rknn_create_mem_from_fd ctx={context} fd={fd} size={size} offset={offset} mem=null"));
            return std::ptr::null_mut();
        }
        // A dma-buf's size comes from lseek(SEEK_END); a memfd's st_size is the same.
        // SAFETY: lseek on the caller's fd; the position of a dma-buf/memfd does not matter to it.
        let end = unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
        let actual = if end > 0 { end as u64 } else { fsize };
        if actual < offset as u64 + size as u64 {
            log(format!("rknn_create_mem_from_fd ctx={context} fd={fd} size={size} offset={offset} mem=null buffer_bytes={actual}"));
            return std::ptr::null_mut();
        }
        // Like the real runtime on a board, optionally refuse what is not a dma-buf (a memfd
        // answers DMA_BUF_IOCTL_SYNC with ENOTTY).
        if std::env::var_os("ZCPIPE_FAKE_RKNN_DMABUF_ONLY").is_some_and(|v| v == "1") {
            match dma_sync(fd, DMA_BUF_SYNC_READ) {
                Ok(()) => {
                    let _ = dma_sync(fd, DMA_BUF_SYNC_READ | DMA_BUF_SYNC_END);
                }
                Err(e) => {
                    let errno = e.raw_os_error().unwrap_or(0);
                    log(format!("rknn_create_mem_from_fd ctx={context} fd={fd} size={size} offset={offset} mem=null not_dmabuf_errno={errno}"));
                    return std::ptr::null_mut();
                }
            }
        }
        let id = st.next_mem;
        st.next_mem += 1;
        st.mems.insert(id, context);
        log(format!(
            "rknn_create_mem_from_fd ctx={context} fd={fd} ino={ino} size={size} offset={offset} virt={} mem={id}",
            !virt_addr.is_null() as u8
        ));
        Box::into_raw(Box::new(TensorMem {
            virt_addr,
            phys_addr: 0,
            fd,
            offset,
            size,
            flags: MEM_FLAGS_FROM_FD,
            priv_data: id as *mut c_void,
        }))
    }));
    r.unwrap_or(std::ptr::null_mut())
}

/// `int rknn_destroy_mem(rknn_context, rknn_tensor_mem*)`.
///
/// # Safety
/// `mem` came from rknn_create_mem_from_fd and is destroyed once.
#[no_mangle]
pub unsafe extern "C" fn rknn_destroy_mem(context: RknnContext, mem: *mut TensorMem) -> c_int {
    guarded("rknn_destroy_mem", || {
        if mem.is_null() {
            return RKNN_ERR_PARAM_INVALID;
        }
        // SAFETY: a live mem of ours (checked against the registry before it is freed).
        let id = unsafe { (*mem).priv_data } as usize;
        let mut st = state();
        if st.mems.get(&id) != Some(&context) {
            return fail(
                format!("rknn_destroy_mem: mem {id} is not a live mem of context {context}"),
                RKNN_ERR_PARAM_INVALID,
            );
        }
        st.mems.remove(&id);
        if let Some(c) = st.ctxs.get_mut(&context) {
            if matches!(&c.input, InputSrc::Mem(b) if b.mem == id) {
                c.input = InputSrc::None;
            }
        }
        // SAFETY: made by Box::into_raw in rknn_create_mem_from_fd, freed once (registry).
        drop(unsafe { Box::from_raw(mem) });
        log(format!("rknn_destroy_mem ctx={context} mem={id}"));
        RKNN_SUCC
    })
}

/// `int rknn_set_io_mem(rknn_context, rknn_tensor_mem*, rknn_tensor_attr*)`: binds an input
/// (uint8 NHWC, pass_through 0, at least `size_with_stride` bytes).
///
/// # Safety
/// `mem` is a live mem; `attr` is a valid rknn_tensor_attr.
#[no_mangle]
pub unsafe extern "C" fn rknn_set_io_mem(context: RknnContext, mem: *mut TensorMem, attr: *mut TensorAttr) -> c_int {
    guarded("rknn_set_io_mem", || {
        if mem.is_null() || attr.is_null() {
            return RKNN_ERR_PARAM_INVALID;
        }
        // SAFETY: checked non-null; the caller's valid structs.
        let (m, a) = unsafe { (&*mem, *attr) };
        let id = m.priv_data as usize;
        let mut st = state();
        log(format!(
            "rknn_set_io_mem ctx={context} mem={id} fd={} index={} type={} fmt={} pass_through={} w_stride={} size_with_stride={}",
            m.fd, a.index, a.type_, a.fmt, a.pass_through, a.w_stride, a.size_with_stride
        ));
        if st.mems.get(&id) != Some(&context) {
            return fail(
                format!("rknn_set_io_mem: mem {id} is not a live mem of context {context}"),
                RKNN_ERR_PARAM_INVALID,
            );
        }
        let Some(c) = st.ctxs.get_mut(&context) else { return RKNN_ERR_CTX_INVALID };
        let need = c.w_stride * c.net.h * 3;
        if a.index != 0 || a.n_dims != 4 {
            return fail(
                format!("rknn_set_io_mem: the fake binds input 0 only (got index {}, {} dims)", a.index, a.n_dims),
                RKNN_ERR_PARAM_INVALID,
            );
        }
        if a.type_ != TENSOR_UINT8 || a.fmt != FMT_NHWC || a.pass_through != 0 {
            return fail(
                format!(
                    "rknn_set_io_mem: input must be UINT8 NHWC pass_through 0 (got type {} fmt {} pass_through {})",
                    a.type_, a.fmt, a.pass_through
                ),
                RKNN_ERR_INPUT_INVALID,
            );
        }
        if (m.size as usize) < need || a.w_stride as usize != c.w_stride {
            return fail(
                format!(
                    "rknn_set_io_mem: buffer of {} bytes with w_stride {}; the NPU reads {need} bytes with w_stride {}",
                    m.size, a.w_stride, c.w_stride
                ),
                RKNN_ERR_INPUT_INVALID,
            );
        }
        c.input = InputSrc::Mem(Bound { mem: id, fd: m.fd, offset: m.offset, size: m.size });
        RKNN_SUCC
    })
}

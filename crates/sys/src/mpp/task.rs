//! MPP's task API (`poll` / `dequeue` / `enqueue`, task metadata): the port and meta key
//! values, the signatures of the extra exported functions, and their resolution from
//! [`Libmpp`].

use std::ffi::{c_char, c_int, c_void};

use anyhow::Result;

use super::*;

// ---------------------------------------------------------------------------------------
// MJPEG through MPP's task API (`MppJpeg`).

/// `MppPortType` (`mpp_task.h`) `MPP_PORT_INPUT`: where the user puts packets (decoder).
pub const MPP_PORT_INPUT: c_int = 0;
/// `MPP_PORT_OUTPUT`: where the user takes decoded frames.
pub const MPP_PORT_OUTPUT: c_int = 1;

/// `FOURCC_META(a, b, c, d)` (`mpp_meta.h`): `a << 24 | b << 16 | c << 8 | d`, as `RK_U32`.
pub(crate) const fn fourcc_meta(k: &[u8; 4]) -> u32 {
    (k[0] as u32) << 24 | (k[1] as u32) << 16 | (k[2] as u32) << 8 | k[3] as u32
}
/// `MppMetaKey` `KEY_INPUT_PACKET` = `FOURCC_META('i', 'p', 'k', 't')` (`mpp_meta.h`): the
/// packet of an input task.
pub const KEY_INPUT_PACKET: u32 = fourcc_meta(b"ipkt");
/// `KEY_OUTPUT_FRAME` = `FOURCC_META('o', 'f', 'r', 'm')`: the frame (with its buffer) the
/// decoder writes for an input task, and the decoded frame of an output task.
pub const KEY_OUTPUT_FRAME: u32 = fourcc_meta(b"ofrm");

/// `MPP_RET (*poll)(MppCtx ctx, MppPortType type, MppPollType timeout)` (`rk_mpi.h`):
/// `MPP_OK` (0) when the port has a task (`mpi_poll` in `mpp/mpi.cpp` turns
/// `_mpp_port_poll`'s task count into `MPP_OK`), `MPP_NOK` on a timeout (not
/// `MPP_ERR_TIMEOUT`). After `mpp_port_awake` it can return 0 with no task, so the dequeue
/// that follows may still find none (`MPP_NOK`).
pub type MppPollFn = unsafe extern "C" fn(MppHandle, c_int, c_int) -> MppRet;
/// `MPP_RET (*dequeue)(MppCtx ctx, MppPortType type, MppTask *task)` and `(*enqueue)(MppCtx
/// ctx, MppPortType type, MppTask task)` (`rk_mpi.h`; enqueue takes the task by value, the
/// same pointer-sized argument).
pub type MppDequeueFn = unsafe extern "C" fn(MppHandle, c_int, *mut MppHandle) -> MppRet;
/// `enqueue`, see [`MppDequeueFn`].
pub type MppEnqueueFn = unsafe extern "C" fn(MppHandle, c_int, MppHandle) -> MppRet;
/// `MPP_RET mpp_task_meta_set_packet(MppTask, MppMetaKey, MppPacket)` and
/// `mpp_task_meta_set_frame` (`mpp_task.h`; `MppMetaKey` is a C enum).
pub type MppTaskMetaSetFn = unsafe extern "C" fn(MppHandle, u32, MppHandle) -> MppRet;
/// `MPP_RET mpp_task_meta_get_packet(MppTask, MppMetaKey, MppPacket *)` and
/// `mpp_task_meta_get_frame` (`mpp_task.h`): the value is taken out of the task's meta.
pub type MppTaskMetaGetFn = unsafe extern "C" fn(MppHandle, u32, *mut MppHandle) -> MppRet;
/// `MPP_RET mpp_frame_init(MppFrame *frame)` (`mpp_frame.h`).
pub type MppFrameInitFn = unsafe extern "C" fn(*mut MppHandle) -> MppRet;
/// `void mpp_frame_set_buffer(MppFrame frame, MppBuffer buffer)` (`mpp_frame.h`): takes a
/// reference on `buffer` (and puts the one it replaces; `mpp_frame.cpp`).
pub type MppFrameSetBufferFn = unsafe extern "C" fn(MppHandle, MppHandle);
/// `MPP_RET mpp_packet_init_with_buffer(MppPacket *packet, MppBuffer buffer)`
/// (`mpp_packet.h`): a packet over the whole buffer (data = its CPU address, length = its
/// size), holding a reference on it until `mpp_packet_deinit`.
pub type MppPacketInitWithBufferFn = unsafe extern "C" fn(*mut MppHandle, MppHandle) -> MppRet;
/// `void mpp_packet_set_length(MppPacket packet, size_t size)` and `void
/// mpp_packet_set_size(MppPacket packet, size_t size)` (`mpp_packet.h`). A JPEG packet needs
/// both: where the hardware reads the stream in place (`cap_hw_jpg_fix` in
/// `osal/mpp_soc.cpp`: RK356x, RK3588, ...) `jpegd_parse` (`mpp/codec/dec/jpeg/jpegd_parser.c`)
/// takes the stream length from `mpp_packet_get_size`, not the length.
pub type MppPacketSetLengthFn = unsafe extern "C" fn(MppHandle, usize);
/// `MPP_RET mpp_buffer_get_with_tag(MppBufferGroup group, MppBuffer *buffer, size_t size,
/// const char *tag, const char *caller)` (`mpp_buffer.h`, the `mpp_buffer_get` macro's target).
pub type MppBufferGetWithTagFn =
    unsafe extern "C" fn(MppHandle, *mut MppHandle, usize, *const c_char, *const c_char) -> MppRet;
/// `MPP_RET mpp_buffer_put_with_caller(MppBuffer buffer, const char *caller)` (`mpp_buffer_put`).
pub type MppBufferPutFn = unsafe extern "C" fn(MppHandle, *const c_char) -> MppRet;
/// `void *mpp_buffer_get_ptr_with_caller(MppBuffer buffer, const char *caller)`
/// (`mpp_buffer_get_ptr`): the buffer's CPU mapping.
pub type MppBufferGetPtrFn = unsafe extern "C" fn(MppHandle, *const c_char) -> *mut c_void;

/// The task-API entry points [`MppJpeg`] needs beyond [`Libmpp`]'s, resolved from the same
/// library when a JPEG decoder is made (so a library without them still serves H.264/H.265).
#[derive(Clone, Copy)]
pub(super) struct TaskSyms {
    pub(super) frame_init: MppFrameInitFn,
    pub(super) frame_set_buffer: MppFrameSetBufferFn,
    pub(super) packet_init_with_buffer: MppPacketInitWithBufferFn,
    pub(super) packet_set_length: MppPacketSetLengthFn,
    pub(super) packet_set_size: MppPacketSetLengthFn,
    pub(super) buffer_get: MppBufferGetWithTagFn,
    pub(super) buffer_put: MppBufferPutFn,
    pub(super) buffer_ptr: MppBufferGetPtrFn,
    pub(super) meta_set_packet: MppTaskMetaSetFn,
    pub(super) meta_set_frame: MppTaskMetaSetFn,
    pub(super) meta_get_packet: MppTaskMetaGetFn,
    pub(super) meta_get_frame: MppTaskMetaGetFn,
}

impl TaskSyms {
    pub(super) fn resolve(lib: &Libmpp) -> Result<TaskSyms> {
        const LACKS: &str =
            "it cannot decode MJPEG through MPP's task API; install Rockchip's current MPP or use --decoder cpu";
        Ok(TaskSyms {
            frame_init: lib_sym!(lib, LACKS, "mpp_frame_init", MppFrameInitFn),
            frame_set_buffer: lib_sym!(lib, LACKS, "mpp_frame_set_buffer", MppFrameSetBufferFn),
            packet_init_with_buffer: lib_sym!(lib, LACKS, "mpp_packet_init_with_buffer", MppPacketInitWithBufferFn),
            packet_set_length: lib_sym!(lib, LACKS, "mpp_packet_set_length", MppPacketSetLengthFn),
            packet_set_size: lib_sym!(lib, LACKS, "mpp_packet_set_size", MppPacketSetLengthFn),
            buffer_get: lib_sym!(lib, LACKS, "mpp_buffer_get_with_tag", MppBufferGetWithTagFn),
            buffer_put: lib_sym!(lib, LACKS, "mpp_buffer_put_with_caller", MppBufferPutFn),
            buffer_ptr: lib_sym!(lib, LACKS, "mpp_buffer_get_ptr_with_caller", MppBufferGetPtrFn),
            meta_set_packet: lib_sym!(lib, LACKS, "mpp_task_meta_set_packet", MppTaskMetaSetFn),
            meta_set_frame: lib_sym!(lib, LACKS, "mpp_task_meta_set_frame", MppTaskMetaSetFn),
            meta_get_packet: lib_sym!(lib, LACKS, "mpp_task_meta_get_packet", MppTaskMetaGetFn),
            meta_get_frame: lib_sym!(lib, LACKS, "mpp_task_meta_get_frame", MppTaskMetaGetFn),
        })
    }
}

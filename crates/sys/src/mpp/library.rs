//! Opening librockchip_mpp: [`Libmpp`], the resolved entry points, and the small checked
//! wrappers (create, control, frame accessors) the decoders share.

use std::ffi::{c_void, CStr};
use std::os::fd::RawFd;
use std::path::Path;

use anyhow::{anyhow, bail, Result};

use super::*;

/// The environment variable naming the librockchip_mpp to open.
pub const LIBMPP_ENV: &str = "ZCPIPE_LIBMPP";

/// The names tried through the loader's search path without [`LIBMPP_ENV`], in order.
pub const LIBMPP_NAMES: [&str; 2] = ["librockchip_mpp.so.1", "librockchip_mpp.so"];

/// The tag and caller strings zcpipe passes where MPP's macros pass `MODULE_TAG` and
/// `__FUNCTION__` (MPP only logs them).
pub(super) const TAG: &CStr = c"zcpipe";

/// librockchip_mpp, opened, with the C entry points zcpipe uses resolved. The library stays
/// loaded as long as this value lives (share it with `Arc`: frames keep it too).
pub struct Libmpp {
    mpp_create: MppCreateFn,
    pub(super) mpp_init: MppInitFn,
    pub(super) mpp_destroy: MppDestroyFn,
    pub(super) mpp_packet_init: MppPacketInitFn,
    pub(super) mpp_packet_deinit: MppPacketDeinitFn,
    pub(super) mpp_packet_set_eos: MppPacketSetEosFn,
    pub(super) mpp_packet_set_pts: MppPacketSetPtsFn,
    frame_width: MppFrameGetU32Fn,
    frame_height: MppFrameGetU32Fn,
    frame_hor_stride: MppFrameGetU32Fn,
    frame_ver_stride: MppFrameGetU32Fn,
    frame_fmt: MppFrameGetFmtFn,
    frame_info_change: MppFrameGetU32Fn,
    frame_eos: MppFrameGetU32Fn,
    frame_errinfo: MppFrameGetU32Fn,
    frame_discard: MppFrameGetU32Fn,
    frame_pts: MppFrameGetPtsFn,
    frame_buf_size: MppFrameGetBufSizeFn,
    pub(super) frame_buffer: MppFrameGetBufferFn,
    pub(super) mpp_frame_deinit: MppFrameDeinitFn,
    pub(super) mpp_buffer_group_get: MppBufferGroupGetFn,
    pub(super) mpp_buffer_import_with_tag: MppBufferImportWithTagFn,
    pub(super) buffer_fd: MppBufferGetIntFn,
    pub(super) buffer_index: MppBufferGetIntFn,
    pub(super) mpp_buffer_group_clear: MppBufferGroupFn,
    pub(super) mpp_buffer_group_put: MppBufferGroupFn,
    pub(super) mpp_buffer_group_unused: MppBufferGroupUnusedFn,
    get_mpp_version: Option<GetMppVersionFn>,
    pub(super) path: String,
    // Last: the function pointers above must not outlive it.
    pub(super) _lib: libloading::Library,
}

impl std::fmt::Debug for Libmpp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Libmpp").field("path", &self.path).finish()
    }
}

/// `lib_sym!(lib, lacks, "name", Type)`: [`Libmpp::symbol`] of `name` as `Type`, `?` applied
/// (for the entry points a decoder or encoder resolves when it is made).
macro_rules! lib_sym {
    ($lib:expr, $lacks:expr, $name:literal, $ty:ty) => {
        // SAFETY: `$ty` spells the header's signature of the symbol (see the type's doc); the
        // decoder or encoder holding the pointer keeps its `Arc<Libmpp>`.
        unsafe { $lib.symbol::<$ty>(concat!($name, "\0"), $lacks) }?
    };
}
pub(super) use lib_sym;

/// `Err` naming `call` and its `MPP_RET` unless it is `MPP_OK`.
pub(super) fn check(call: &str, r: MppRet) -> Result<()> {
    if r == MPP_OK {
        return Ok(());
    }
    bail!("MPP {call} failed: {} ({r})", ret_name(r))
}

impl Libmpp {
    /// Opens librockchip_mpp: `library` if given, else `$ZCPIPE_LIBMPP`, else
    /// `librockchip_mpp.so.1` then `librockchip_mpp.so` (through the dynamic loader's search
    /// path), and resolves every symbol zcpipe calls. Errors name what was tried and the fix.
    pub fn open(library: Option<&Path>) -> Result<Libmpp> {
        // SAFETY: librockchip_mpp's initialisers set up its logging and buffer service
        // singletons (devices are opened on mpp_init).
        let (source, errors) = match unsafe { crate::load_library(library, LIBMPP_ENV, &LIBMPP_NAMES) } {
            Ok((lib, path)) => return Self::resolve(lib, path),
            Err(e) => e,
        };
        if source == crate::LibrarySource::Env {
            bail!("cannot load librockchip_mpp named by {LIBMPP_ENV} ({errors}): point {LIBMPP_ENV} at a librockchip_mpp.so or unset it")
        }
        bail!(
            "cannot load librockchip_mpp ({errors}); install Rockchip's MPP (Debian/Ubuntu for Rockchip: apt install librockchip-mpp1; or build rockchip-linux/mpp) or set {LIBMPP_ENV}=/path/to/librockchip_mpp.so; or decode on the CPU"
        )
    }

    pub(super) fn resolve(lib: libloading::Library, path: String) -> Result<Libmpp> {
        macro_rules! sym {
            ($name:literal, $ty:ty) => {{
                // SAFETY: the symbol is declared extern "C" by MPP's headers with exactly the
                // signature `$ty` spells (see the type's doc); the fn pointer is copied out and
                // stays valid while `lib` lives, which `Libmpp` guarantees by owning it.
                let s: Result<libloading::Symbol<'_, $ty>, _> = unsafe { lib.get(concat!($name, "\0").as_bytes()) };
                *s.map_err(|e| anyhow!("{path} has no symbol `{}` ({e}): it is not a librockchip_mpp zcpipe can use; install Rockchip's MPP or fix {LIBMPP_ENV}", $name))?
            }};
        }
        // SAFETY: as in `sym!`; an optional symbol.
        let get_mpp_version = unsafe { lib.get::<GetMppVersionFn>(b"get_mpp_version\0") }.ok().map(|s| *s);
        Ok(Libmpp {
            mpp_create: sym!("mpp_create", MppCreateFn),
            mpp_init: sym!("mpp_init", MppInitFn),
            mpp_destroy: sym!("mpp_destroy", MppDestroyFn),
            mpp_packet_init: sym!("mpp_packet_init", MppPacketInitFn),
            mpp_packet_deinit: sym!("mpp_packet_deinit", MppPacketDeinitFn),
            mpp_packet_set_eos: sym!("mpp_packet_set_eos", MppPacketSetEosFn),
            mpp_packet_set_pts: sym!("mpp_packet_set_pts", MppPacketSetPtsFn),
            frame_width: sym!("mpp_frame_get_width", MppFrameGetU32Fn),
            frame_height: sym!("mpp_frame_get_height", MppFrameGetU32Fn),
            frame_hor_stride: sym!("mpp_frame_get_hor_stride", MppFrameGetU32Fn),
            frame_ver_stride: sym!("mpp_frame_get_ver_stride", MppFrameGetU32Fn),
            frame_fmt: sym!("mpp_frame_get_fmt", MppFrameGetFmtFn),
            frame_info_change: sym!("mpp_frame_get_info_change", MppFrameGetU32Fn),
            frame_eos: sym!("mpp_frame_get_eos", MppFrameGetU32Fn),
            frame_errinfo: sym!("mpp_frame_get_errinfo", MppFrameGetU32Fn),
            frame_discard: sym!("mpp_frame_get_discard", MppFrameGetU32Fn),
            frame_pts: sym!("mpp_frame_get_pts", MppFrameGetPtsFn),
            frame_buf_size: sym!("mpp_frame_get_buf_size", MppFrameGetBufSizeFn),
            frame_buffer: sym!("mpp_frame_get_buffer", MppFrameGetBufferFn),
            mpp_frame_deinit: sym!("mpp_frame_deinit", MppFrameDeinitFn),
            mpp_buffer_group_get: sym!("mpp_buffer_group_get", MppBufferGroupGetFn),
            mpp_buffer_import_with_tag: sym!("mpp_buffer_import_with_tag", MppBufferImportWithTagFn),
            buffer_fd: sym!("mpp_buffer_get_fd_with_caller", MppBufferGetIntFn),
            buffer_index: sym!("mpp_buffer_get_index_with_caller", MppBufferGetIntFn),
            mpp_buffer_group_clear: sym!("mpp_buffer_group_clear", MppBufferGroupFn),
            mpp_buffer_group_put: sym!("mpp_buffer_group_put", MppBufferGroupFn),
            mpp_buffer_group_unused: sym!("mpp_buffer_group_unused", MppBufferGroupUnusedFn),
            get_mpp_version,
            path,
            _lib: lib,
        })
    }

    /// The exported function `name` (NUL-terminated) as fn pointer type `T`, for the entry
    /// points resolved when a decoder or encoder needs them ([`TaskSyms`], the encoder's);
    /// `lacks` says in the error what the library then cannot do, and the fix.
    ///
    /// # Safety
    /// `T` is exactly the C signature MPP's headers give `name`. The copied pointer is valid
    /// while the library is loaded: the caller uses it only while it holds this `Libmpp`.
    pub(super) unsafe fn symbol<T: Copy>(&self, name: &str, lacks: &str) -> Result<T> {
        // SAFETY: the caller's contract: `T` is the symbol's signature.
        let s = unsafe { self._lib.get::<T>(name.as_bytes()) };
        let s = s.map_err(|e| {
            let bare = name.trim_end_matches('\0');
            anyhow!("{} has no symbol `{bare}` ({e}): {lacks}", self.path)
        })?;
        Ok(*s)
    }

    /// `mpp_create`, checked: a context and MPP's `MppApi` table, whose size must be this
    /// binding's (else the context is destroyed and the error names both sizes).
    pub(super) fn create(&self) -> Result<(MppHandle, *const MppApi)> {
        let mut ctx: MppHandle = std::ptr::null_mut();
        let mut api: *const MppApi = std::ptr::null();
        // SAFETY: two out-pointers to locals; matches rk_mpi.h.
        check("mpp_create", unsafe { (self.mpp_create)(&mut ctx, &mut api) })?;
        if ctx.is_null() || api.is_null() {
            bail!("MPP mpp_create returned no context: the library at {} is broken", self.path);
        }
        // SAFETY: `api` is MPP's static function table, valid while the library is loaded.
        let size = unsafe { (*api).size } as usize;
        if size != std::mem::size_of::<MppApi>() {
            // SAFETY: the context just created, destroyed once; it is not returned.
            unsafe { (self.mpp_destroy)(ctx) };
            bail!(
                "{}'s MppApi is {size} bytes, zcpipe's binding of rk_mpi.h expects {}: an MPP of another ABI; install Rockchip's current MPP or decode on the CPU",
                self.path,
                std::mem::size_of::<MppApi>()
            );
        }
        Ok((ctx, api))
    }

    /// `MppApi::control(ctx, cmd, param)` through table `api`; `name` is the command's name
    /// for the error.
    pub(super) fn control(
        &self,
        api: *const MppApi,
        ctx: MppHandle,
        name: &str,
        cmd: MpiCmd,
        param: *mut c_void,
    ) -> Result<()> {
        // SAFETY: `api` is MPP's static table (size checked by `create`).
        let Some(f) = (unsafe { (*api).control }) else {
            bail!("MPP's MppApi has no control entry: the library at {} is broken", self.path)
        };
        // SAFETY: the live context; `param` points to what `cmd` takes (see each command's
        // doc) and lives for the call.
        check(&format!("control({name})"), unsafe { f(ctx, cmd, param) })
    }

    /// The fields of `frame` (`mpp_frame.h` accessors), with the `fd` and `buffer_index` its
    /// buffer has (negative values dropped).
    ///
    /// # Safety
    /// `frame` is a live `MppFrame` of this library.
    pub(super) unsafe fn frame_info(
        &self,
        frame: MppHandle,
        fd: Option<RawFd>,
        buffer_index: Option<i32>,
    ) -> FrameInfo {
        // SAFETY: (every accessor) the caller's live frame; the accessors only read it.
        unsafe {
            FrameInfo {
                width: (self.frame_width)(frame),
                height: (self.frame_height)(frame),
                hor_stride: (self.frame_hor_stride)(frame),
                ver_stride: (self.frame_ver_stride)(frame),
                fmt: (self.frame_fmt)(frame),
                info_change: (self.frame_info_change)(frame) != 0,
                eos: (self.frame_eos)(frame) != 0,
                errinfo: (self.frame_errinfo)(frame),
                discard: (self.frame_discard)(frame),
                pts: (self.frame_pts)(frame),
                buf_size: (self.frame_buf_size)(frame),
                fd: fd.filter(|f| *f >= 0),
                buffer_index: buffer_index.filter(|i| *i >= 0),
            }
        }
    }

    /// What was opened (`librockchip_mpp.so.1`, or the path given).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// `get_mpp_version()`, copied (e.g. `7e9b5f8 author: ... date: ...`), when the library
    /// exports it.
    pub fn version(&self) -> Option<String> {
        let f = self.get_mpp_version?;
        // SAFETY: no arguments; MPP returns a pointer to a static NUL-terminated string.
        let p = unsafe { f() };
        // SAFETY: non-null static string (checked for null first).
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

//! The runtime opened: [`Rknn`], the 12 entry points resolved by name, their checked
//! wrappers, and [`RknnError`].

use std::ffi::{c_int, c_void, OsString};
use std::fmt;
use std::path::PathBuf;

use anyhow::{anyhow, Result};

use super::*;

type InitFn = unsafe extern "C" fn(*mut RknnContext, *mut c_void, u32, u32, *mut c_void) -> c_int;
type DupFn = unsafe extern "C" fn(*mut RknnContext, *mut RknnContext) -> c_int;
type DestroyFn = unsafe extern "C" fn(RknnContext) -> c_int;
type QueryFn = unsafe extern "C" fn(RknnContext, u32, *mut c_void, u32) -> c_int;
type InputsSetFn = unsafe extern "C" fn(RknnContext, u32, *mut RknnInput) -> c_int;
type CoreMaskFn = unsafe extern "C" fn(RknnContext, u32) -> c_int;
type RunFn = unsafe extern "C" fn(RknnContext, *mut c_void) -> c_int;
type OutputsGetFn = unsafe extern "C" fn(RknnContext, u32, *mut RknnOutput, *mut c_void) -> c_int;
type OutputsReleaseFn = unsafe extern "C" fn(RknnContext, u32, *mut RknnOutput) -> c_int;
type MemFromFdFn = unsafe extern "C" fn(RknnContext, i32, *mut c_void, u32, i32) -> *mut RknnTensorMem;
type DestroyMemFn = unsafe extern "C" fn(RknnContext, *mut RknnTensorMem) -> c_int;
type SetIoMemFn = unsafe extern "C" fn(RknnContext, *mut RknnTensorMem, *mut RknnTensorAttr) -> c_int;

/// A failed RKNN call: the function and its error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RknnError {
    /// The function (`rknn_init`, ...).
    pub call: &'static str,
    /// The code it returned (`RKNN_ERR_*`; -1 for a null pointer from `rknn_create_mem_*`).
    pub code: c_int,
}

impl fmt::Display for RknnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {} ({})", self.call, error_name(self.code), self.code)
    }
}

impl std::error::Error for RknnError {}

fn check(call: &'static str, code: c_int) -> Result<(), RknnError> {
    if code == RKNN_SUCC {
        Ok(())
    } else {
        Err(RknnError { call, code })
    }
}

/// The environment variable naming the runtime library to open instead of `librknnrt.so`.
pub const LIBRKNNRT_ENV: &str = "ZCPIPE_LIBRKNNRT";

/// The name tried through the loader's search path without [`LIBRKNNRT_ENV`].
pub const LIBRKNNRT_NAME: &str = "librknnrt.so";

/// The opened runtime: the library and the 12 functions zcpipe calls.
///
/// Every method is a direct call of the C function of the same name; the library stays
/// loaded as long as this value lives (keep it in an `Arc` next to every context made with
/// it, and destroy the contexts first).
pub struct Rknn {
    path: String,
    init: InitFn,
    dup_context: DupFn,
    destroy: DestroyFn,
    query: QueryFn,
    inputs_set: InputsSetFn,
    set_core_mask: CoreMaskFn,
    run: RunFn,
    outputs_get: OutputsGetFn,
    outputs_release: OutputsReleaseFn,
    create_mem_from_fd: MemFromFdFn,
    destroy_mem: DestroyMemFn,
    set_io_mem: SetIoMemFn,
    // Last: the function pointers above are only valid while it is loaded.
    _lib: libloading::Library,
}

impl fmt::Debug for Rknn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rknn").field("path", &self.path).finish()
    }
}

impl Rknn {
    /// Opens `$ZCPIPE_LIBRKNNRT`, or `librknnrt.so` through the loader's search path.
    /// The error is one line naming what was tried and the fix.
    pub fn open() -> Result<Rknn> {
        match std::env::var_os(LIBRKNNRT_ENV).filter(|v| !v.is_empty()) {
            Some(p) => Self::open_path(p, true),
            None => Self::open_path(OsString::from(LIBRKNNRT_NAME), false),
        }
    }

    /// Opens the library at `path` (a bare file name goes through the loader's search path).
    /// `from_env` only changes the wording of the error.
    pub fn open_path(path: OsString, from_env: bool) -> Result<Rknn> {
        let shown = PathBuf::from(&path).display().to_string();
        // SAFETY: loading a shared library runs its initialisers; librknnrt's (and the
        // fake's) are plain C/Rust static constructors with no preconditions on us.
        let lib = unsafe { libloading::Library::new(&path) }.map_err(|e| {
            let why = e.to_string().replace('\n', " ");
            if from_env {
                anyhow!("cannot load the RKNN runtime {shown} named by {LIBRKNNRT_ENV} ({why}): point {LIBRKNNRT_ENV} at a librknnrt.so (RKNPU2 runtime 2.x) or unset it")
            } else {
                anyhow!("cannot load the RKNN runtime librknnrt.so ({why}): install Rockchip's RKNPU2 runtime 2.x (librknnrt.so into /usr/lib) or set {LIBRKNNRT_ENV}=/path/to/librknnrt.so; or run on the CPU with --infer onnx --model models/yolox_nano.onnx")
            }
        })?;
        macro_rules! sym {
            ($name:literal, $t:ty) => {{
                // SAFETY: the symbol is the C function of this name in rknn_api.h, whose
                // prototype `$t` transcribes; the pointer is copied out of the `Symbol` and
                // used only while `_lib` (stored in the same struct, dropped last) is loaded.
                let s: libloading::Symbol<'_, $t> = unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| anyhow!("{shown} has no {} ({e}): it is not librknnrt.so 2.x; install the RKNPU2 runtime 2.x or fix {LIBRKNNRT_ENV}", $name))?;
                *s
            }};
        }
        Ok(Rknn {
            init: sym!("rknn_init", InitFn),
            dup_context: sym!("rknn_dup_context", DupFn),
            destroy: sym!("rknn_destroy", DestroyFn),
            query: sym!("rknn_query", QueryFn),
            inputs_set: sym!("rknn_inputs_set", InputsSetFn),
            set_core_mask: sym!("rknn_set_core_mask", CoreMaskFn),
            run: sym!("rknn_run", RunFn),
            outputs_get: sym!("rknn_outputs_get", OutputsGetFn),
            outputs_release: sym!("rknn_outputs_release", OutputsReleaseFn),
            create_mem_from_fd: sym!("rknn_create_mem_from_fd", MemFromFdFn),
            destroy_mem: sym!("rknn_destroy_mem", DestroyMemFn),
            set_io_mem: sym!("rknn_set_io_mem", SetIoMemFn),
            path: shown,
            _lib: lib,
        })
    }

    /// The path or name the library was opened from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// `rknn_init(&ctx, model, size, flag, NULL)`: loads a model from memory (`size > 0`).
    /// The runtime may keep reading `model` until `rknn_destroy`: the caller keeps it mapped.
    pub fn init(&self, model: &[u8], flag: u32) -> Result<RknnContext, RknnError> {
        let size =
            u32::try_from(model.len()).map_err(|_| RknnError { call: "rknn_init", code: RKNN_ERR_MODEL_INVALID })?;
        let mut ctx: RknnContext = 0;
        // SAFETY: `ctx` is a valid out-pointer; `model` is `size` readable bytes (the runtime
        // takes `void *` but does not write the model); a null extend is allowed.
        let r = unsafe { (self.init)(&mut ctx, model.as_ptr() as *mut c_void, size, flag, std::ptr::null_mut()) };
        check("rknn_init", r).map(|_| ctx)
    }

    /// `rknn_dup_context(&ctx, &out)`: a second context sharing `ctx`'s weights.
    pub fn dup_context(&self, ctx: RknnContext) -> Result<RknnContext, RknnError> {
        let (mut inp, mut out) = (ctx, 0 as RknnContext);
        // SAFETY: both pointers are valid for one rknn_context.
        let r = unsafe { (self.dup_context)(&mut inp, &mut out) };
        check("rknn_dup_context", r).map(|_| out)
    }

    /// `rknn_destroy(ctx)`.
    pub fn destroy(&self, ctx: RknnContext) -> Result<(), RknnError> {
        // SAFETY: plain value argument; the caller does not use `ctx` afterwards.
        check("rknn_destroy", unsafe { (self.destroy)(ctx) })
    }

    /// `rknn_query(ctx, cmd, &info, sizeof info)` for a query whose answer is `T`
    /// ([`RknnInputOutputNum`], [`RknnTensorAttr`] with `index` set, [`RknnSdkVersion`]).
    pub fn query<T: QueryInfo>(&self, ctx: RknnContext, cmd: u32, info: &mut T) -> Result<(), RknnError> {
        // SAFETY: `info` is a valid, writable `T`, a `#[repr(C)]` struct of the header whose
        // size we pass; `QueryInfo` is only implemented for the structs these commands fill.
        let r = unsafe { (self.query)(ctx, cmd, info as *mut T as *mut c_void, std::mem::size_of::<T>() as u32) };
        check("rknn_query", r)
    }

    /// `rknn_inputs_set(ctx, 1, &input)` for input `index` from `data` (the copying path).
    pub fn inputs_set(&self, ctx: RknnContext, index: u32, data: &[u8], type_: u32, fmt: u32) -> Result<(), RknnError> {
        let size = u32::try_from(data.len())
            .map_err(|_| RknnError { call: "rknn_inputs_set", code: RKNN_ERR_PARAM_INVALID })?;
        let mut input = RknnInput { index, buf: data.as_ptr() as *mut c_void, size, pass_through: 0, type_, fmt };
        // SAFETY: one valid `rknn_input` whose `buf` points at `size` readable bytes; the
        // runtime copies the input before returning (rknn_api.h: inputs are set, then run).
        check("rknn_inputs_set", unsafe { (self.inputs_set)(ctx, 1, &mut input) })
    }

    /// `rknn_set_core_mask(ctx, mask)` (`RKNN_NPU_CORE_*`).
    pub fn set_core_mask(&self, ctx: RknnContext, mask: u32) -> Result<(), RknnError> {
        // SAFETY: value arguments only.
        check("rknn_set_core_mask", unsafe { (self.set_core_mask)(ctx, mask) })
    }

    /// `rknn_run(ctx, NULL)`: runs once, blocking.
    pub fn run(&self, ctx: RknnContext) -> Result<(), RknnError> {
        // SAFETY: a null extend is allowed.
        check("rknn_run", unsafe { (self.run)(ctx, std::ptr::null_mut()) })
    }

    /// `rknn_outputs_get(ctx, 1, &out, NULL)` into our own buffer (`is_prealloc = 1`), in
    /// the output's own type (`want_float = 0`), then `rknn_outputs_release`. Returns the
    /// bytes the runtime says it wrote (at most `buf.len()`).
    pub(crate) fn output_into(&self, ctx: RknnContext, index: u32, buf: &mut [u8]) -> Result<usize, RknnError> {
        let size = u32::try_from(buf.len())
            .map_err(|_| RknnError { call: "rknn_outputs_get", code: RKNN_ERR_PARAM_INVALID })?;
        let mut out = RknnOutput { want_float: 0, is_prealloc: 1, index, buf: buf.as_mut_ptr() as *mut c_void, size };
        // SAFETY: one valid `rknn_output` pointing at `size` writable bytes we own; a null
        // extend is allowed.
        check("rknn_outputs_get", unsafe { (self.outputs_get)(ctx, 1, &mut out, std::ptr::null_mut()) })?;
        let written = (out.size as usize).min(buf.len());
        // SAFETY: the same output array rknn_outputs_get filled; with is_prealloc = 1 the
        // runtime frees nothing of ours.
        check("rknn_outputs_release", unsafe { (self.outputs_release)(ctx, 1, &mut out) })?;
        Ok(written)
    }

    /// Outputs `0 .. bufs.len()` in one `rknn_outputs_get(ctx, n, outs, NULL)`, each into
    /// its own buffer (`is_prealloc = 1`, `want_float = 0`), then `rknn_outputs_release`.
    /// Returns the bytes the runtime says it wrote into each (at most its length). With one
    /// buffer this is [`Rknn::output_into`] of output 0.
    pub fn outputs_into(&self, ctx: RknnContext, bufs: &mut [&mut [u8]]) -> Result<Vec<usize>, RknnError> {
        let invalid = RknnError { call: "rknn_outputs_get", code: RKNN_ERR_PARAM_INVALID };
        if let [buf] = bufs {
            return self.output_into(ctx, 0, buf).map(|n| vec![n]);
        }
        let n = u32::try_from(bufs.len()).map_err(|_| invalid)?;
        let mut outs = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| {
                let size = u32::try_from(b.len()).map_err(|_| invalid)?;
                Ok(RknnOutput {
                    want_float: 0,
                    is_prealloc: 1,
                    index: i as u32,
                    buf: b.as_mut_ptr() as *mut c_void,
                    size,
                })
            })
            .collect::<Result<Vec<_>, RknnError>>()?;
        // SAFETY: `n` valid `rknn_output`s, each pointing at `size` writable bytes of a
        // buffer we own and hold borrowed for the call; a null extend is allowed.
        check("rknn_outputs_get", unsafe { (self.outputs_get)(ctx, n, outs.as_mut_ptr(), std::ptr::null_mut()) })?;
        let written = outs.iter().zip(bufs.iter()).map(|(o, b)| (o.size as usize).min(b.len())).collect();
        // SAFETY: the same output array rknn_outputs_get filled; with is_prealloc = 1 the
        // runtime frees nothing of ours.
        check("rknn_outputs_release", unsafe { (self.outputs_release)(ctx, n, outs.as_mut_ptr()) })?;
        Ok(written)
    }

    /// `rknn_create_mem_from_fd(ctx, fd, NULL, size, offset)`: imports `size` bytes at
    /// `offset` of a dma-buf. The runtime keeps its own reference to the buffer; the
    /// caller keeps `fd` open until [`Rknn::destroy_mem`] anyway.
    pub fn create_mem_from_fd(
        &self,
        ctx: RknnContext,
        fd: i32,
        size: u32,
        offset: i32,
    ) -> Result<*mut RknnTensorMem, RknnError> {
        // SAFETY: value arguments; a null virt_addr means "no CPU mapping" (rknn_api.h).
        let mem = unsafe { (self.create_mem_from_fd)(ctx, fd, std::ptr::null_mut(), size, offset) };
        if mem.is_null() {
            Err(RknnError { call: "rknn_create_mem_from_fd", code: RKNN_ERR_FAIL })
        } else {
            Ok(mem)
        }
    }

    /// `rknn_destroy_mem(ctx, mem)`.
    ///
    /// # Safety
    /// `mem` came from [`Rknn::create_mem_from_fd`] on `ctx` and is not used afterwards.
    pub unsafe fn destroy_mem(&self, ctx: RknnContext, mem: *mut RknnTensorMem) -> Result<(), RknnError> {
        // SAFETY: the caller's contract.
        check("rknn_destroy_mem", unsafe { (self.destroy_mem)(ctx, mem) })
    }

    /// `rknn_set_io_mem(ctx, mem, &attr)`: binds `mem` to the tensor `attr` describes
    /// (`attr.index`; for an input, `type_`, `fmt` and `pass_through` say how to read it).
    ///
    /// # Safety
    /// `mem` came from [`Rknn::create_mem_from_fd`] on `ctx` and is not destroyed yet.
    pub unsafe fn set_io_mem(
        &self,
        ctx: RknnContext,
        mem: *mut RknnTensorMem,
        attr: &mut RknnTensorAttr,
    ) -> Result<(), RknnError> {
        // SAFETY: the caller's contract for `mem`; `attr` is a valid rknn_tensor_attr.
        check("rknn_set_io_mem", unsafe { (self.set_io_mem)(ctx, mem, attr) })
    }
}

/// Structs `rknn_query` fills: only these may be passed to [`Rknn::query`].
pub trait QueryInfo: Sized {}
impl QueryInfo for RknnInputOutputNum {}
impl QueryInfo for RknnTensorAttr {}
impl QueryInfo for RknnSdkVersion {}

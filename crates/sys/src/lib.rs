//! Thin, typed wrappers over the kernel interfaces and vendor libraries zcpipe calls
//! directly: one module per subsystem (`dmabuf`, `udmabuf`, `v4l2` with its constants,
//! formats, buffers, stream parameters, ioctls and node probing; `rga`, `rknn` and `mpp` for
//! librga, librknnrt and librockchip_mpp, loaded at run time with libloading), each ioctl or vendor call wrapped once,
//! each struct checked against its header's size (and each ioctl's number) in a test run on
//! x86_64 and aarch64. Every ioctl's `unsafe` lives here, and every vendor call has its
//! wrapper here; the few vendor calls whose contract the caller must keep are `unsafe fn`s
//! (librga's virtual-address images, librknnrt's `rknn_set_io_mem`), called with their
//! `SAFETY` line where the buffers live (and `zcpipe doctor` opens the libraries itself to
//! report whether they load). Nothing here makes a policy decision or knows a stage.

/// An I/O error in words, without Rust's ` (os error N)` suffix (`No such file or
/// directory`): for messages that go on to name the fix.
pub fn errno_words(e: &std::io::Error) -> String {
    let s = e.to_string();
    s.split(" (os error").next().unwrap_or_default().to_string()
}

/// How [`load_library`] looked for a vendor library, for the caller's message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LibrarySource {
    /// The path the caller gave.
    Given,
    /// The path the environment variable named.
    Env,
    /// The default names, through the dynamic loader's search path.
    SearchPath,
}

/// Opens a vendor library at run time (dlopen; never linked): `library` if given, else the
/// path in `$env` when set and not empty, else each of `names` in order through the loader's
/// search path. Returns the library and what it was opened as, or how it was looked for and
/// dlerror's texts (each starting with the file name) joined by `; `.
///
/// # Safety
/// Loading a library runs its initialisers: the caller names a vendor library whose
/// initialisers only set up its own state (librga, librockchip_mpp).
pub(crate) unsafe fn load_library(
    library: Option<&std::path::Path>,
    env: &str,
    names: &[&str],
) -> Result<(libloading::Library, String), (LibrarySource, String)> {
    let (source, candidates): (LibrarySource, Vec<std::ffi::OsString>) = match (library, std::env::var_os(env)) {
        (Some(p), _) => (LibrarySource::Given, vec![p.as_os_str().to_owned()]),
        (None, Some(p)) if !p.is_empty() => (LibrarySource::Env, vec![p]),
        _ => (LibrarySource::SearchPath, names.iter().map(std::ffi::OsString::from).collect()),
    };
    let mut errors = Vec::new();
    for c in &candidates {
        // SAFETY: per this function's contract.
        match unsafe { libloading::Library::new(c) } {
            Ok(lib) => return Ok((lib, c.to_string_lossy().into_owned())),
            Err(e) => errors.push(e.to_string().replace('\n', " ")),
        }
    }
    Err((source, errors.join("; ")))
}

#[cfg(test)]
mod abi;
pub mod board;
pub mod dmabuf;
pub mod drm;
pub mod fourcc;
pub mod mpp;
pub mod rga;
pub mod rknn;
pub mod udmabuf;
pub mod v4l2;

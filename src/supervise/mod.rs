//! Starting, wiring and stopping the stage processes.
//!
//! `zcpipe run` ([`run`]) starts `capture`, `scale`, `infer` and `publish` as children of
//! the same binary (`zcpipe stage <name>`), each in its own process group (so a terminal's
//! Ctrl-C reaches only the supervisor) and with `PR_SET_PDEATHSIG` (so no child outlives
//! it). SIGINT/SIGTERM are forwarded to capture, which ends the stream; the others drain
//! and exit in order. Children report to the supervisor over a pipe ([`crate::metrics`]).
//! Each stage listens on `<run dir>/<stage>.sock` and removes it on exit; the supervisor
//! removes the run directory.

pub mod run;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Set by SIGINT/SIGTERM; every loop checks it.
pub static STOP: AtomicBool = AtomicBool::new(false);
/// The last signal received (0 = none).
pub static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    LAST_SIGNAL.store(sig, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

/// Installs SIGINT/SIGTERM/SIGHUP handlers that set [`STOP`] (async-signal-safe: one atomic store).
/// SIGPIPE is ignored so a vanished client is an `EPIPE`, not a death.
pub fn install_signal_handlers() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let act = SigAction::new(SigHandler::Handler(on_signal), SaFlags::empty(), SigSet::empty());
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only performs atomic stores, which are async-signal-safe.
        if let Err(e) = unsafe { sigaction(s, &act) } {
            log::warn!("cannot install {s} handler: {e}");
        }
    }
    // SAFETY: ignoring SIGPIPE has no preconditions.
    let _ = unsafe { nix::sys::signal::signal(Signal::SIGPIPE, SigHandler::SigIgn) };
}

/// Base directory for zcpipe's sockets: `$XDG_RUNTIME_DIR/zcpipe`, or `/run/zcpipe` for
/// root, or `/tmp/zcpipe-<uid>`.
pub fn runtime_base() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("zcpipe");
    }
    let uid = nix::unistd::Uid::effective();
    if uid.is_root() {
        PathBuf::from("/run/zcpipe")
    } else {
        PathBuf::from(format!("/tmp/zcpipe-{uid}"))
    }
}

/// The run directory of an instance: `--run-dir` if given, else `<runtime base>/<instance>`.
pub fn run_dir(instance: &str, explicit: Option<&PathBuf>) -> PathBuf {
    explicit.cloned().unwrap_or_else(|| runtime_base().join(instance))
}

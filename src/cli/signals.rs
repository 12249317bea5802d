//! The process's stop flag and the signal handlers that set it. The command line owns
//! them and hands the flag down to whatever it runs (a stage, the supervisor, watch,
//! compare); no stage, nor the supervisor, installs a handler or reads a global flag.
//! `zcpipe bench` is the one exception: for the length of a measurement it installs its
//! own handlers (SIGCHLD and SIGALRM to time its forked peers out, SIGINT/SIGTERM to abort
//! them) and puts these back afterwards.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGINT/SIGTERM/SIGHUP; handed to every loop as its stop flag.
pub static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Installs SIGINT/SIGTERM/SIGHUP handlers that set [`STOP`] (async-signal-safe: one atomic
/// store). SIGPIPE is ignored so a vanished client is an `EPIPE`, not a death.
pub fn install_signal_handlers() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let act = SigAction::new(SigHandler::Handler(on_signal), SaFlags::empty(), SigSet::empty());
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only performs an atomic store, which is async-signal-safe.
        if let Err(e) = unsafe { sigaction(s, &act) } {
            log::warn!("cannot install {s} handler: {e}");
        }
    }
    // SAFETY: ignoring SIGPIPE has no preconditions.
    let _ = unsafe { nix::sys::signal::signal(Signal::SIGPIPE, SigHandler::SigIgn) };
}

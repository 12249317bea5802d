//! The process's stop flag and the signal handlers that set it. The command line owns
//! them and hands the flag down to whatever it runs (a stage, the supervisor, watch,
//! compare); no stage, nor the supervisor, installs a handler or reads a global flag.
//! `zcpipe bench` is the one exception: for the length of a measurement it installs its
//! own handlers (SIGCHLD and SIGALRM to time its forked peers out, SIGINT/SIGTERM to abort
//! them) and puts these back afterwards.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGINT/SIGTERM (and SIGHUP, unless [`HUP_RELOADS`]); handed to every loop as its stop flag.
pub static STOP: AtomicBool = AtomicBool::new(false);

/// Set by SIGHUP when [`HUP_RELOADS`]: `zcpipe run` reads its configuration file again.
pub static RELOAD: AtomicBool = AtomicBool::new(false);

/// Whether SIGHUP asks for a reload (`zcpipe run`, as daemons do) rather than a stop.
pub static HUP_RELOADS: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    if sig == libc::SIGHUP && HUP_RELOADS.load(Ordering::SeqCst) {
        RELOAD.store(true, Ordering::SeqCst);
    } else {
        STOP.store(true, Ordering::SeqCst);
    }
}

/// Installs SIGINT/SIGTERM/SIGHUP handlers that set [`STOP`] or [`RELOAD`] (async-signal-safe:
/// atomic loads and stores). SIGPIPE is ignored so a vanished client is an `EPIPE`, not a death.
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

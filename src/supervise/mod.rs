//! Starting, wiring and stopping the stage processes.
//!
//! `zcpipe run` ([`run`]) starts `capture`, `scale`, `infer` and `publish` as children of
//! the same binary (`zcpipe stage <name>`), each in its own process group (so a terminal's
//! Ctrl-C reaches only the supervisor) and with `PR_SET_PDEATHSIG` (so no child outlives
//! it). SIGINT/SIGTERM are forwarded to capture, which ends the stream; the others drain
//! and exit in order. Children report to the supervisor over a pipe ([`crate::metrics`]). The command line
//! hands the supervisor its checked [`run::RunConfig`] (each stage's command line included)
//! and the stop flag its signal handlers set.
//! Each stage listens on `<run dir>/<stage>.sock` and removes it on exit; the supervisor
//! removes the run directory.

pub mod run;

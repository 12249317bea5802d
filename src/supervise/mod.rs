//! Starting, wiring and stopping the stage processes.
//!
//! `zcpipe run` ([`run`]) starts `capture`, `scale`, `infer` and `publish` as children of
//! the same binary (`zcpipe stage <name>`), each in its own process group (so a terminal's
//! Ctrl-C reaches only the supervisor) and with `PR_SET_PDEATHSIG` (so no child outlives
//! it). SIGINT/SIGTERM are forwarded to capture, which ends the stream; the others drain
//! and exit in order. Children report to the supervisor over a pipe ([`zcpipe_core::metrics`]). The command line
//! hands the supervisor its checked [`run::RunConfig`] (each stage's command line included)
//! and the stop flag its signal handlers set.
//! Each stage listens on `<run dir>/<stage>.sock` and removes it on exit; the supervisor
//! removes the run directory.
//!
//! A stage that dies after set-up (its first report says it is ready) is restarted alone,
//! with back-off, while the others keep running and keep their process ids: its neighbours
//! let go of what it held and wait for it ([`zcpipe_core::pool::Upstream`],
//! [`zcpipe_core::stage::Downstream`]). [`RestartPolicy`] bounds how often.

pub mod run;

use std::time::Duration;

/// How often `zcpipe run` restarts a stage that died (`--restart-max`, `--restart-window`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Restarts of one stage allowed within `window`; one more death stops the run. 0:
    /// every death stops the run.
    pub max: u32,
    /// The window restarts are counted over.
    pub window: Duration,
    /// How long a restarted stage must run for its back-off to start again from
    /// [`BACKOFF_FIRST`] (`--restart-reset`, default a minute).
    pub reset_after: Duration,
    /// A set-up stage that sends no report for this long is killed (and so restarted):
    /// `--watchdog`, `None` for off. Stages report at least every
    /// [`zcpipe_core::stage::HEARTBEAT`].
    pub watchdog: Option<Duration>,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            max: 5,
            window: Duration::from_secs(60),
            reset_after: Duration::from_secs(60),
            watchdog: Some(Duration::from_secs(5)),
        }
    }
}

/// The wait before the first restart of a stage; it doubles with each restart up to
/// [`BACKOFF_MAX`], and is back to this once a stage ran [`RestartPolicy::reset_after`].
pub const BACKOFF_FIRST: Duration = Duration::from_millis(100);
/// The longest wait before a restart.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

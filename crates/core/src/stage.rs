//! What every stage process shares: the context the command line hands it ([`StageCtx`]:
//! the stop flag, the report sink, the data-path settings), the frame-loop skeleton
//! ([`StageCtx::run_loop`]), how a receive maps to a loop step ([`incoming`]), and how a
//! stage ends ([`StageCtx::close`]): drained, reported, and its error (if any) returned.
//!
//! Every way out of a frame loop (end of stream, a frame limit, a signal, a neighbour's
//! hang-up, an error) goes through [`StageCtx::close`], so the final report always goes
//! out. Only a clean end is an end of stream downstream; after an error a stage hangs up,
//! and its neighbours see [`crate::Error::PeerGone`].
//!
//! This module owns no stage: `capture`, `scale`, `infer` and `publish` each call it, and
//! it never names one of them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::channel::Recv;
use crate::config::DataPath;
use crate::frame::{FrameDesc, Stage};
use crate::id::StageId;
use crate::link::{Conn, ControlMsg, Listener};
use crate::metrics::{open_fd_count, EndFacts, Facts, FrameSpan, Reporter, StageReport};
use crate::pool::{PoolProducer, Upstream, WriteLoan};

/// A stage's final-report facts: `(key, value)` pairs for [`StageReport::extra`].
pub type Extras = Vec<(&'static str, serde_json::Value)>;

/// What a stage process is handed by the command line: its name, the stop flag (set by
/// SIGINT/SIGTERM/SIGHUP in the process that owns the signal handlers), where its reports
/// go, and the data-path settings the pipeline's stages share.
pub struct StageCtx<'a> {
    /// Which stage process this is, for its reports and its socket.
    pub id: StageId,
    /// Set when the stage must stop; every loop and wait checks it.
    pub stop: &'a AtomicBool,
    /// The supervisor's report socket (or the debug log).
    pub reporter: Reporter,
    /// Settings every hop of the pipeline shares.
    pub data: DataPath,
}

/// What one turn of a frame loop did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// Go on (a frame went through, or nothing arrived yet).
    Next,
    /// The stream ended for this reason (`"end of stream"`, `"frame limit"`, ...).
    End(&'static str),
}

/// What a receive means to a frame loop: see [`incoming`].
// A frame moves through this once per receive; boxing it would allocate per frame.
#[allow(clippy::large_enum_variant)]
pub enum Incoming<T> {
    /// The next frame.
    Item(T),
    /// The upstream finished cleanly and everything it sent was taken.
    Eos,
    /// Nothing arrived in time: check the stop flag and stats, then receive again.
    Idle,
}

/// Maps a receive from `upstream` (`"capture"`, ...) to a loop step: the upstream's
/// hang-up is a [`crate::Error::PeerGone`] naming it; while idle, and at end of stream, a downstream
/// already gone (`downstream_gone()`, named `downstream`) is one too, since a consumer
/// already gone cannot drain and its death is what ended the stream.
pub fn incoming<T>(
    r: Recv<T>,
    upstream: &str,
    downstream: &str,
    downstream_gone: impl FnOnce() -> bool,
) -> crate::Result<Incoming<T>> {
    let gone = |who: &str| crate::Error::peer_gone(format!("{who} stage hung up"));
    match r {
        Recv::Item(f) => Ok(Incoming::Item(f)),
        Recv::Hangup => Err(gone(upstream)),
        _ if downstream_gone() => Err(gone(downstream)),
        Recv::Eos => Ok(Incoming::Eos),
        Recv::Idle => Ok(Incoming::Idle),
    }
}

/// How a frame loop ended, for the closing log lines and the final report's `end_reason`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ending {
    /// The loop's own reason (`"end of stream"`, `"signal"`), or the error that ended it.
    pub reason: String,
    /// `Info` for a reason, `Debug` for an error (the error is reported on its own,
    /// quietly if a neighbour hung up).
    pub level: log::Level,
    /// Whether the loop ended without an error: only then is the end of stream sent on.
    pub clean: bool,
}

impl Ending {
    /// Reads how `ended` ended.
    pub fn of(ended: &crate::Result<&'static str>) -> Ending {
        match ended {
            Ok(reason) => Ending { reason: reason.to_string(), level: log::Level::Info, clean: true },
            Err(e) => Ending { reason: format!("{e:#}"), level: log::Level::Debug, clean: false },
        }
    }
}

/// What a stage's drain did at the end: a log line (before the open-fd count), the facts
/// for the final report, and the drain's error, if any.
pub struct Drained {
    /// Said before `open fds before exit: ...`, e.g. `"2 buffers came back after end of stream, 0 still out; "`.
    pub said: String,
    /// Facts for the final report (before the common `open_fds_*` and `end_reason`).
    pub extras: Extras,
    /// The drain's own failure.
    pub result: Result<()>,
}

impl Drained {
    /// A drain with nothing to say and nothing to report.
    pub fn nothing() -> Drained {
        Drained { said: String::new(), extras: vec![], result: Ok(()) }
    }
}

impl StageCtx<'_> {
    /// Whether the stop flag is set.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Runs a frame loop: calls `turn(state)` until it returns [`Turn::End`], the stop flag
    /// is set (`"signal"`) or it fails; calls `report(state)` every stats interval
    /// ([`DataPath::stats_interval`]) and at least every [`HEARTBEAT`] (the supervisor's
    /// watchdog takes a stage that stops reporting for hung). Returns why the loop ended,
    /// or the error.
    pub fn run_loop<S>(
        &self,
        state: &mut S,
        mut report: impl FnMut(&S),
        mut turn: impl FnMut(&mut S) -> crate::Result<Turn>,
    ) -> crate::Result<&'static str> {
        let every = Some(self.data.stats_interval.map_or(HEARTBEAT, |e| e.min(HEARTBEAT)));
        let mut last = Instant::now();
        loop {
            if self.stopped() {
                return Ok("signal");
            }
            if every.is_some_and(|e| last.elapsed() >= e) {
                report(state);
                last = Instant::now();
            }
            if let Turn::End(reason) = turn(state)? {
                return Ok(reason);
            }
        }
    }

    /// Ends a stage after its frame loop: logs how it ended after `what` (`"12 frames"`), runs
    /// `drain(state)` (which ends the output hop: [`crate::pool::PoolProducer::end`]
    /// or the like), counts open fds against `fds_setup`, sends the final report through
    /// `report(state, extras)` (the drain's facts, then `open_fds_setup`, `open_fds_exit`,
    /// `end_reason` and `cpu_accesses`, [`crate::dmabuf::cpu_accesses`]), and returns the loop's error, else the drain's, else exit code 0.
    #[allow(clippy::too_many_arguments)]
    pub fn close<S>(
        &self,
        state: &mut S,
        ended: crate::Result<&'static str>,
        what: impl std::fmt::Display,
        fds_setup: usize,
        drain: impl FnOnce(&mut S, &Ending) -> Drained,
        report: impl FnOnce(&S, Facts),
    ) -> crate::Result<i32> {
        let end = Ending::of(&ended);
        log::log!(end.level, "{} after {what}; draining", end.reason);
        let d = drain(state, &end);
        let fds_exit = open_fd_count();
        log::log!(end.level, "{}open fds before exit: {fds_exit} (after set-up: {fds_setup})", d.said);
        let mut facts = Facts::from(d.extras);
        facts.put(&EndFacts {
            open_fds_setup: fds_setup,
            open_fds_exit: fds_exit,
            end_reason: end.reason,
            cpu_accesses: crate::dmabuf::cpu_accesses(),
        });
        report(state, facts);
        ended?;
        d.result?;
        Ok(0)
    }

    /// Hands a written frame on: stamps its exit from `stage` (CLOCK_MONOTONIC), publishes
    /// it on `loan` (see [`WriteLoan::publish`]) and counts it in `span` (started at
    /// `start`). Errors if the consumer died ([`crate::Error::PeerGone`]) or corrupted the ring.
    pub fn hand_off(
        &self,
        loan: WriteLoan<'_>,
        mut desc: FrameDesc,
        stage: Stage,
        span: &mut FrameSpan,
        start: Instant,
    ) -> crate::Result<Turn> {
        desc.stamp_out(stage);
        loan.publish(desc, self.stop)?;
        span.tick(start);
        Ok(Turn::Next)
    }

    /// The report of a stage that produces into a pool (capture, scale): [`StageCtx::report`]
    /// with `frames` (in, out), when the frames out went (`span`), and the output hop's
    /// ring, pool and copy counters.
    pub fn producer_report(
        &self,
        start: Instant,
        final_report: bool,
        extras: impl Into<Facts>,
        prod: &PoolProducer,
        frames: (u64, u64),
        span: FrameSpan,
    ) -> StageReport {
        StageReport {
            frames_in: frames.0,
            frames_out: frames.1,
            output_ring: Some(prod.counters()),
            pool: Some(prod.stats()),
            copy_out: prod.copy_counters(),
            out_span: Some(span),
            ..self.report(start, final_report, extras)
        }
    }

    /// Tells the supervisor this stage is set up (its first report, with `ready: true` in
    /// `extra`): from now on, if it dies, `zcpipe run` restarts it instead of stopping the
    /// run (a stage that fails during set-up is a configuration error, said once).
    pub fn ready(&self, start: Instant) {
        self.reporter.send(&self.report(start, false, vec![("ready", true.into())]));
    }

    /// A report of this stage with its pid, elapsed time since `start`, `final_report` and
    /// `extras` filled in; the caller adds its counters.
    pub fn report(&self, start: Instant, final_report: bool, extras: impl Into<Facts>) -> StageReport {
        StageReport {
            stage: self.id.clone(),
            pid: std::process::id(),
            final_report,
            elapsed_s: start.elapsed().as_secs_f64(),
            extra: extras.into(),
            ..Default::default()
        }
    }
}

/// Ends a stage's output hop ([`PoolProducer::end`]: drained after a clean end, up to
/// [`DRAIN_TIMEOUT`]): the buffers that came back after end of stream and those still out,
/// said (with `after` before the `;`, e.g. `", before STREAMOFF"`) and reported
/// (`buffers_returned_at_end`, `buffers_still_out`), the drain's error, and the buffers
/// still out.
pub fn drain_pool(prod: &mut PoolProducer, clean: bool, after: &str) -> (Drained, usize) {
    let ((returned, still_out), result) = prod.end(clean, DRAIN_TIMEOUT);
    let said = format!("{returned} buffers came back after end of stream, {still_out} still out{after}; ");
    let extras = vec![("buffers_returned_at_end", returned.into()), ("buffers_still_out", still_out.into())];
    (Drained { said, extras, result }, still_out)
}

/// The longest time a stage's frame loop goes without a report: its heartbeat, which
/// `zcpipe run`'s watchdog (`--watchdog`) listens for.
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// How often a producing stage looks at its listening socket for a downstream stage that
/// (re-)joins, or a connection to refuse ([`Downstream::serve`]).
pub(crate) const REJOIN_EVERY: Duration = Duration::from_millis(50);

/// A producing stage's listening socket after set-up: a downstream stage that died and was
/// restarted connects here again and is served the same output ([`Downstream::serve`]);
/// anything else that connects is refused and logged ([`Listener::poll_hello`]).
pub struct Downstream {
    listener: Listener,
    last: Instant,
}

impl Downstream {
    /// Keeps `listener` for re-joins.
    pub fn new(listener: Listener) -> Downstream {
        Downstream { listener, last: Instant::now() }
    }

    /// Connections refused so far (at set-up and since; [`Listener::refused`]).
    pub fn refused(&self) -> u64 {
        self.listener.refused()
    }

    /// Whether [`REJOIN_EVERY`] has passed since the last look ([`Downstream::serve`]).
    pub fn due(&self) -> bool {
        self.last.elapsed() >= REJOIN_EVERY
    }

    /// Its facts for a stage's report: `refused` (connections refused so far).
    pub fn facts(&self) -> Extras {
        vec![("refused", self.refused().into())]
    }

    /// At most every [`REJOIN_EVERY`] (one poll(2)), looks for a connection to the output
    /// `out`: while `serving(out)` names the live consumer's pid, a newcomer is refused;
    /// otherwise its hello goes to `join`, which serves it (an offer on a fresh ring) or
    /// refuses it. A failed `join` is a refusal like the others (logged with the peer's pid
    /// and uid, counted in [`Downstream::refused`]) and the hop stays free for the next one.
    pub fn serve<P>(
        &mut self,
        out: &mut P,
        serving: impl Fn(&mut P, &ControlMsg) -> Option<i32>,
        join: impl FnOnce(&mut P, Conn, ControlMsg) -> Result<()>,
    ) {
        if !self.due() {
            return;
        }
        self.last = Instant::now();
        if let Some((conn, hello)) = self.listener.poll_hello(&mut |h| serving(out, h)) {
            let peer = conn.peer();
            if let Err(e) = join(out, conn, hello) {
                self.listener.refuse(&format!("{peer}: could not serve it: {e:#}"));
            }
        }
    }
}

/// A consumer's facts about its input hop for its report: `upstream_refused` (re-joins
/// refused: [`Upstream::refused`]), `input_taken` and `input_rejected` (descriptors taken
/// and rejected over every hop joined, in its own count: [`Upstream::own_counts`]).
pub fn upstream_facts(up: &Upstream) -> Extras {
    let own = up.own_counts();
    vec![
        ("upstream_refused", up.refused().into()),
        ("input_taken", own.consumed.into()),
        ("input_rejected", own.rejected.into()),
    ]
}

/// [`Downstream::serve`] for a pool's consumer (`consumer`, the stage a re-joining one
/// must be): its hello checked with `check` (as at set-up), then the same pool offered on
/// a fresh ring ([`PoolProducer::reoffer`]). A tap's hello ([`crate::link::tap_hello_holding`])
/// is served at any time with a ring of its own ([`PoolProducer::add_tap`]), and taps that
/// hung up are let go ([`PoolProducer::check_taps`]).
pub fn serve_pool(
    down: &mut Downstream,
    prod: &mut PoolProducer,
    consumer: crate::frame::Stage,
    check: impl FnOnce(&ControlMsg) -> std::result::Result<(), String>,
) {
    if down.due() {
        prod.check_taps();
    }
    down.serve(
        prod,
        |p, hello| if hello.tap().is_some() { None } else { p.live_consumer() },
        |p, conn, hello| {
            if let Some(tap) = hello.tap() {
                return p.add_tap(conn, &tap.name, tap.hold());
            }
            let conn = check_hello(conn, &hello, check)?;
            p.reoffer(conn, consumer)
        },
    )
}

/// Checks a re-joining consumer's hello with `check` (the same rule as at set-up: `Err`
/// is the refusal line); a refused one is told why on `conn`. Returns the connection to
/// serve, or the refusal as the error.
pub fn check_hello(
    conn: Conn,
    hello: &ControlMsg,
    check: impl FnOnce(&ControlMsg) -> std::result::Result<(), String>,
) -> Result<Conn> {
    if let Err(error) = check(hello) {
        let _ = conn.send(&ControlMsg::Refuse { error: error.clone() }, &[]);
        anyhow::bail!("{error}");
    }
    Ok(conn)
}

/// Exit code of a stage that stopped because a neighbour went away during set-up
/// ([`crate::Error::PeerGone`]: it refused us, or died before its offer): not its own fault, and the
/// neighbour reports its own cause. After set-up a neighbour's death is waited out instead
/// (the neighbour is restarted and joined again).
pub const EXIT_PEER_GONE: i32 = 3;

/// How long a stage waits for a frame before it looks at the stop flag, its stats and its
/// neighbours again.
pub const IDLE_WAIT: Duration = Duration::from_millis(100);

/// How long a stage's drain waits for its consumer to give every buffer back at the end.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(stop: &AtomicBool) -> StageCtx<'_> {
        StageCtx {
            id: StageId::from(Stage::Scale),
            stop,
            reporter: Reporter::new(None),
            data: DataPath { stats_interval: None, ..Default::default() },
        }
    }

    #[test]
    fn a_loop_ends_on_its_reason_on_a_signal_and_on_an_error() {
        let stop = AtomicBool::new(false);
        let c = ctx(&stop);
        let mut n = 0;
        let r = c.run_loop(
            &mut n,
            |_| {},
            |n| {
                *n += 1;
                Ok(if *n == 3 { Turn::End("frame limit") } else { Turn::Next })
            },
        );
        assert_eq!((r.unwrap(), n), ("frame limit", 3));
        let r = c.run_loop(&mut n, |_| {}, |_| Err(crate::Error::peer_gone("infer stage hung up")));
        let e = r.unwrap_err();
        assert!(matches!(e, crate::Error::PeerGone { .. }));
        assert_eq!(
            Ending::of(&Err(e)),
            Ending { reason: "infer stage hung up".into(), level: log::Level::Debug, clean: false }
        );
        stop.store(true, Ordering::Relaxed);
        assert_eq!(c.run_loop(&mut n, |_| {}, |_| -> crate::Result<Turn> { unreachable!() }).unwrap(), "signal");
    }

    #[test]
    fn receives_name_the_neighbour_that_hung_up() {
        let up = |r: Recv<u8>, down_gone: bool| incoming(r, "capture", "infer", || down_gone);
        assert!(matches!(up(Recv::Item(7), true).unwrap(), Incoming::Item(7)));
        assert_eq!(up(Recv::Hangup, false).err().unwrap().to_string(), "capture stage hung up");
        assert_eq!(up(Recv::Idle, true).err().unwrap().to_string(), "infer stage hung up");
        assert_eq!(up(Recv::Eos, true).err().unwrap().to_string(), "infer stage hung up");
        assert!(matches!(up(Recv::Eos, false).unwrap(), Incoming::Eos));
        assert!(matches!(up(Recv::Idle, false).unwrap(), Incoming::Idle));
    }

    #[test]
    fn close_reports_every_ending_and_returns_the_first_error() {
        let stop = AtomicBool::new(false);
        let c = ctx(&stop);
        let got = std::cell::RefCell::new(Facts::default());
        let code = c.close(
            &mut (),
            Ok("end of stream"),
            "5 frames",
            7,
            |_, e| Drained { said: String::new(), extras: vec![("clean", e.clean.into())], result: Ok(()) },
            |_, x| *got.borrow_mut() = x,
        );
        let got = got.into_inner();
        assert_eq!(code.unwrap(), 0);
        #[derive(serde::Deserialize, Default)]
        struct Clean {
            clean: bool,
        }
        assert!(got.view::<Clean>().clean);
        let end = got.view::<EndFacts>();
        assert_eq!((end.end_reason.as_str(), end.open_fds_setup), ("end of stream", 7));
        let keys: Vec<String> = serde_json::to_value(&got).unwrap().as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["clean", "cpu_accesses", "end_reason", "open_fds_exit", "open_fds_setup"]);
        let mut reported = false;
        let r = c.close(
            &mut reported,
            Err(crate::Error::other("boom")),
            "0 frames",
            7,
            |reported, _| {
                *reported = true;
                Drained { result: Err(anyhow::anyhow!("drain")), ..Drained::nothing() }
            },
            |_, _| {},
        );
        assert!(reported, "the drain runs after an error too");
        assert_eq!(r.unwrap_err().to_string(), "boom");
    }
}

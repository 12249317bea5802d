//! The consumer's end of a frame hop that outlives its producer: when the upstream stage
//! dies (its control socket hangs up), [`Upstream`] lets go of everything of the old hop
//! (ring, doorbells, the pool's fds: the dead process's buffers are freed once the last
//! mapping goes) and joins the restarted upstream as at set-up, with a fresh hello.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::super::channel::{Recv, Waitable};
use super::super::frame::{RestartMark, Stage};
use super::super::link::{Conn, ControlMsg, WaitMode};
use super::super::ring::{OwnCounts, RingCounters};
use super::{Frame, PoolConsumer};

/// First wait between two attempts to reach a restarting upstream; it doubles up to
/// [`REJOIN_MAX_DELAY`].
const REJOIN_FIRST_DELAY: Duration = Duration::from_millis(10);
/// Longest wait between two attempts to reach a restarting upstream.
const REJOIN_MAX_DELAY: Duration = Duration::from_millis(50);
/// How long a restarted upstream may take, once connected, to answer the hello: less than
/// the supervisor's watchdog (5 s), so an impostor that never answers cannot stall the
/// consumer's loop into being killed as hung.
pub const OFFER_TIMEOUT: Duration = Duration::from_secs(3);

/// A frame hop's consumer end that re-joins its upstream after it restarts.
pub struct Upstream {
    path: PathBuf,
    stage: Stage,
    hello: ControlMsg,
    wait: WaitMode,
    spin: Duration,
    cur: Option<PoolConsumer>,
    /// When the upstream hung up, while it is away.
    away: Option<Instant>,
    next_try: Instant,
    delay: Duration,
    joins: u64,
    /// Ring counters of the hops before the current one.
    carried: RingCounters,
    /// What this stage took and rejected from the rings before the current one (its own
    /// counts: exact whatever a peer wrote into the shared counters).
    carried_own: OwnCounts,
    /// Whether the hop joined at set-up sends frames as bytes (`--copy-mode`): a re-join
    /// must offer the same (a zero-copy stage reads no data socket).
    copy_mode: bool,
    /// Joins refused because what answered at `path` was not a hop this stage can use
    /// (a malformed or hostile offer: see [`Upstream::refused`]).
    refused: u64,
    /// A notice for the next frame (the capture stage came back).
    mark: Option<RestartMark>,
    /// When the last frame came: a capture stage that hung before it died (stopped, killed
    /// by the watchdog) lost the frames since then, not only those since its hang-up.
    last_item: Option<Instant>,
    /// Fault injection for tests ([`FAULT_ENV`] = `hold-frames:<this stage>`): every frame
    /// is taken and never given back, as a stuck consumer would.
    hold: bool,
}

use crate::hooks::FAULT_ENV;

impl Upstream {
    /// Joins `stage`'s hop at `path` as at set-up ([`Conn::connect_retry`] until `timeout`,
    /// then [`PoolConsumer::join`] with `hello`). Errors as those do.
    pub fn join(
        path: PathBuf,
        stage: Stage,
        hello: ControlMsg,
        wait: WaitMode,
        spin: Duration,
        stop: &AtomicBool,
        timeout: Duration,
    ) -> crate::Result<Upstream> {
        let conn = Conn::connect_retry(&path, &format!("{} stage", stage.name()), stop, timeout)?;
        let c = PoolConsumer::join(conn, &hello, wait, stage.name())?;
        c.set_spin(spin);
        let mut up = Upstream::pending(path, stage, hello, wait, spin, c.offer.copy_mode);
        up.cur = Some(c);
        up.away = None;
        up.joins = 1;
        Ok(up)
    }

    /// An upstream not joined yet (a camera whose capture stage is still opening its
    /// source, or waits for it with `--wait-for-camera`): [`Upstream::recv`] tries to join
    /// it with the same back-off as a re-join, and the first join carries no restart
    /// notice. `copy_mode` is the hop kind this stage expects (`--copy-mode`). Never fails:
    /// errors of a join are counted and logged as [`Upstream::refused`] ones.
    pub fn pending(
        path: PathBuf,
        stage: Stage,
        hello: ControlMsg,
        wait: WaitMode,
        spin: Duration,
        copy_mode: bool,
    ) -> Upstream {
        let me = match &hello {
            ControlMsg::Hello { stage, .. } => stage.clone(),
            _ => String::new(),
        };
        let hold = crate::hooks::fault().is_some_and(|f| f.holds_frames(&me));
        if hold {
            log::warn!("{FAULT_ENV}=hold-frames:{me}: fault injection: every frame taken is kept");
        }
        Upstream {
            path,
            stage,
            hello,
            wait,
            spin,
            cur: None,
            away: Some(Instant::now()),
            next_try: Instant::now(),
            delay: REJOIN_FIRST_DELAY,
            joins: 0,
            carried: RingCounters::default(),
            carried_own: OwnCounts::default(),
            copy_mode,
            refused: 0,
            mark: None,
            last_item: None,
            hold,
        }
    }

    /// The upstream's name in logs: its socket's (`capture`, `capture@door`, `scale`).
    pub fn name(&self) -> &str {
        self.path.file_stem().and_then(|s| s.to_str()).unwrap_or(self.stage.name())
    }

    /// The socket this upstream is joined at.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The hop joined now (`None` while the upstream is away).
    pub fn current(&self) -> Option<&PoolConsumer> {
        self.cur.as_ref()
    }

    /// How many times this stage joined the upstream (1 at set-up, one more per re-join): a
    /// change tells the stage to bind the new pool (a device that imported the old one).
    pub fn joins(&self) -> u64 {
        self.joins
    }

    /// Whether the upstream is away (hung up, not joined again yet).
    pub fn is_away(&self) -> bool {
        self.cur.is_none()
    }

    /// Ring counters over every hop joined so far.
    pub fn counters(&self) -> RingCounters {
        self.carried.then(self.cur.as_ref().map(|c| c.counters()).unwrap_or_default())
    }

    /// What this stage took (accepted) and rejected from its upstream's rings over every
    /// hop joined so far, counted in its own memory.
    pub fn own_counts(&self) -> OwnCounts {
        let now = self.cur.as_ref().map(|c| c.own_counts()).unwrap_or_default();
        OwnCounts {
            consumed: self.carried_own.consumed + now.consumed,
            rejected: self.carried_own.rejected + now.rejected,
        }
    }

    /// Re-joins refused so far: whatever listened at the upstream's socket while it was
    /// away answered with something this stage cannot use (a malformed message, an offer
    /// with fds of the wrong kind or count, a memfd without seals, sizes that do not fit),
    /// each logged with that peer's pid and uid and the reason. An upstream that hangs up or
    /// refuses the hello itself is not counted (it is restarting, or busy).
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Waits up to `timeout` for the next frame ([`PoolConsumer::recv`]). The upstream's
    /// hang-up is not an error: the old hop is let go, and while the upstream is away this
    /// tries (with back-off, 10 ms doubling to 50 ms: a refused connect(2) costs little) to join it again, returning
    /// [`Recv::Idle`] meanwhile; it never returns [`Recv::Hangup`]. The first frame after
    /// the capture stage came back carries a [`RestartMark`].
    pub fn recv(&mut self, timeout: Duration) -> crate::Result<Recv<Frame>> {
        let Some(c) = &self.cur else {
            if !self.try_rejoin() && !timeout.is_zero() {
                std::thread::sleep(
                    timeout.min(self.next_try.saturating_duration_since(Instant::now())).max(Duration::from_millis(1)),
                );
            }
            return Ok(Recv::Idle);
        };
        let r = match c.recv(timeout) {
            Ok(Recv::Hangup) | Err(crate::Error::PeerGone { .. }) => None,
            Ok(r) => Some(r),
            Err(e) => return Err(e),
        };
        match r {
            Some(Recv::Item(f)) if self.hold => {
                std::mem::forget(f);
                Ok(Recv::Idle)
            }
            Some(Recv::Item(mut f)) => {
                self.last_item = Some(Instant::now());
                if let Some(m) = self.mark.take() {
                    f.mark(m);
                }
                Ok(Recv::Item(f))
            }
            Some(other) => Ok(other),
            None => {
                self.lose();
                Ok(Recv::Idle)
            }
        }
    }

    fn lose(&mut self) {
        if let Some(c) = self.cur.take() {
            self.carried = self.carried.then(RingCounters { in_flight: 0, ..c.counters() });
            let own = c.own_counts();
            self.carried_own.consumed += own.consumed;
            self.carried_own.rejected += own.rejected;
            log::warn!(
                "the {} stage (pid {}) hung up: let go of its pool; waiting for it to come back at {}",
                self.name(),
                c.peer_pid(),
                self.path.display()
            );
        }
        self.away = Some(Instant::now());
        self.delay = REJOIN_FIRST_DELAY;
        self.next_try = Instant::now();
    }

    /// One attempt to join the restarted upstream, if one is due; whether it joined.
    fn try_rejoin(&mut self) -> bool {
        if Instant::now() < self.next_try {
            return false;
        }
        self.next_try = Instant::now() + self.delay;
        self.delay = (self.delay * 2).min(REJOIN_MAX_DELAY);
        let conn = match Conn::try_connect(&self.path) {
            Ok(Some(conn)) => conn,
            Ok(None) => return false,
            Err(e) => {
                self.refuse(&format!("{e:#}"));
                return false;
            }
        };
        let peer = conn.peer();
        let join = || -> crate::Result<PoolConsumer> {
            conn.set_recv_timeout(Some(OFFER_TIMEOUT))?;
            let c = PoolConsumer::join(conn, &self.hello, self.wait, self.name())?;
            if c.offer.copy_mode != self.copy_mode {
                let mode = |copy: bool| if copy { "--copy-mode" } else { "zero-copy" };
                return Err(crate::Error::other(format!(
                    "{} offered a {} hop; this stage joined a {} one at set-up",
                    self.name(),
                    mode(c.offer.copy_mode),
                    mode(self.copy_mode)
                )));
            }
            c.set_recv_timeout(None)?;
            Ok(c)
        };
        let joined = join();
        match joined {
            Ok(c) => {
                c.set_spin(self.spin);
                let down = self.away.take().map(|t| t.elapsed()).unwrap_or_default();
                let first = self.joins == 0;
                if first {
                    log::info!(
                        "joined the {} stage ({peer}): {} ({} buffers, {})",
                        self.name(),
                        c.offer.description,
                        c.buffers().len(),
                        c.offer.memory
                    );
                } else if self.stage == Stage::Capture {
                    // Frames the source did not make while it was down, at its nominal rate:
                    // since its last frame (it may have hung before it hung up).
                    let gap = self.last_item.map_or(down, |t| t.elapsed().max(down));
                    let lost = (c.offer.fps * gap.as_secs_f64()).floor() as u32;
                    self.mark = Some(RestartMark::restart(Stage::Capture, lost.into()));
                }
                if !first {
                    log::info!(
                        "joined the {} stage again ({peer}) after {:.1} s: {} ({} buffers, {})",
                        self.name(),
                        down.as_secs_f64(),
                        c.offer.description,
                        c.buffers().len(),
                        c.offer.memory
                    );
                }
                self.cur = Some(c);
                self.joins += 1;
                self.delay = REJOIN_FIRST_DELAY;
                true
            }
            Err(e @ crate::Error::PeerGone { .. }) => {
                log::debug!("the {} stage is not back yet ({peer}): {e:#}", self.name());
                false
            }
            Err(e) => {
                self.refuse(&format!("{peer}: {e:#}"));
                false
            }
        }
    }

    /// Counts and logs (the first 20, then at powers of two) a re-join refused for `why`.
    fn refuse(&mut self, why: &str) {
        self.refused += 1;
        if self.refused <= 20 || self.refused.is_power_of_two() {
            log::warn!(
                "refused what answered as the {} stage on {} ({} so far): {why}",
                self.name(),
                self.path.display(),
                self.refused
            );
        }
    }
}

/// An upstream that is joined waits like its hop; one that is away has nothing to wait on
/// (its re-join is tried by [`Upstream::recv`]), so the caller leaves it out of the wait.
impl Upstream {
    /// The joined hop, as one consumer of a wait on several ([`super::super::channel::wait_any`]).
    pub fn waitable(&self) -> Option<&dyn Waitable> {
        self.cur.as_ref().map(|c| c as &dyn Waitable)
    }
}

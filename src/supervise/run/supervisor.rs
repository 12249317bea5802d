//! The supervisor's loop, as named steps: take the stages' reports, pass a stop on to
//! capture, kill a hung stage, reap the dead and plan their restarts, start the restarts
//! that are due, escalate a stop that takes too long, print the stats line. One turn every
//! 50 ms until every process has ended; then [`Supervisor::finish`] cleans up and says
//! the summary.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::signal::{kill, Signal};

use zcpipe_core::id::{Role, StageId};
use zcpipe_core::metrics::StageReport;
use zcpipe_core::stage::EXIT_PEER_GONE;

use super::procs::{code, plan_restart, probe, process_state, spawn, Proc, REPORT_FD};
use super::summary::{summary_text, StatsLines};
use super::{camera_summaries, Carried, RunConfig, RunSummary};

/// A run in progress: its processes, their latest reports, and where its stop stands.
pub(super) struct Supervisor {
    a: RunConfig,
    exe: PathBuf,
    start: Instant,
    procs: Vec<Proc>,
    /// Kept open: a restarted stage gets the same pipe (the reader ends when the last
    /// process holding it is gone and this is dropped, at the end).
    report_w: Option<OwnedFd>,
    reports: mpsc::Receiver<StageReport>,
    reader: std::thread::JoinHandle<()>,
    latest: BTreeMap<StageId, StageReport>,
    carried: Carried,
    signalled_at: Option<Instant>,
    failed_at: Option<Instant>,
    capture_done_at: Option<Instant>,
    termed: bool,
    killed: bool,
    stats: StatsLines,
    /// Why the run stopped early, when a stage died and was not restarted.
    fatal: Option<String>,
    /// The control socket (`None`: this run takes no changes).
    control: Option<super::control::ControlServer>,
    /// The command line's side of a change (`None`: this run takes no changes).
    live: Option<Box<dyn super::Reconfigure>>,
    /// Cameras removed while the run goes on (each keeps its place).
    removed: std::collections::BTreeSet<String>,
    /// Changes to tell the detections socket's clients once the restarted publish stage is up.
    untold: Vec<String>,
}

mod apply;

/// Reads the stages' reports (one JSON line per message) from the report socket into `tx`,
/// until every writer has closed its end.
fn read_reports(report_r: OwnedFd, tx: mpsc::Sender<StageReport>) {
    // A report of many cameras is several KiB; the socket takes at most its send buffer.
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = match nix::sys::socket::recv(report_r.as_raw_fd(), &mut buf, nix::sys::socket::MsgFlags::empty()) {
            Ok(0) => break,
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                log::debug!("stage reports: {e}");
                break;
            }
        };
        match serde_json::from_slice::<StageReport>(&buf[..n]) {
            Ok(r) => {
                if tx.send(r).is_err() {
                    break;
                }
            }
            // Never expected (one message is one report): a stage of another zcpipe version?
            Err(e) => {
                let text: String = String::from_utf8_lossy(&buf[..n]).chars().take(200).collect();
                log::warn!("unparsable stage report ({e}), not counted: {text}")
            }
        }
    }
}

/// The stages' report channel: a `SOCK_SEQPACKET` pair, so each stage's report is one
/// message whatever its size (a pipe keeps a write whole only up to `PIPE_BUF`, 4 KiB,
/// which a run of many cameras passes) and the stages sharing the writing end never
/// interleave.
fn report_channel() -> Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
        .context("socketpair(AF_UNIX, SOCK_SEQPACKET) for the stages' reports")
}

impl Supervisor {
    /// Starts every stage of `a` in order (if one cannot start, those started are killed
    /// and the error returned) and the thread that reads their reports.
    pub(super) fn start(a: RunConfig, live: Option<Box<dyn super::Reconfigure>>) -> Result<Supervisor> {
        let exe = std::env::current_exe().context("finding the zcpipe binary")?;
        let (report_r, report_w) = report_channel()?;
        let start = Instant::now();
        let mut procs: Vec<Proc> = vec![];
        let several = a.cameras.len() > 1;
        for (id, args) in &a.stage_flags {
            let mut args = args.clone();
            args.push(format!("--report-fd={REPORT_FD}"));
            match spawn(&exe, id, args.clone(), &a.secret_env, &report_w) {
                Ok(child) => {
                    let forever = several && id.is(zcpipe_core::frame::Stage::Capture);
                    procs.push(Proc::new(id.clone(), child, args, forever))
                }
                Err(e) => {
                    for p in &mut procs {
                        let _ = p.child.kill();
                        let _ = p.child.wait();
                    }
                    // The stages started had bound their sockets: none is left behind.
                    remove_leftovers(&a);
                    return Err(e);
                }
            }
        }
        let (tx, reports) = mpsc::channel::<StageReport>();
        let reader = std::thread::spawn(move || read_reports(report_r, tx));
        // Changes come only to a run that can take them; one that cannot bind its socket
        // runs on without them.
        let control = match live.is_some() {
            true => super::control::ControlServer::bind(&a.data.run_dir, a.control_group.clone())
                .map_err(|e| log::warn!("no control socket, so no changes while the run goes on: {e:#}"))
                .ok(),
            false => None,
        };
        Ok(Supervisor {
            control,
            live,
            removed: Default::default(),
            untold: vec![],
            a,
            exe,
            start,
            procs,
            report_w: Some(report_w),
            reports,
            reader,
            latest: BTreeMap::new(),
            carried: Carried::default(),
            signalled_at: None,
            failed_at: None,
            capture_done_at: None,
            termed: false,
            killed: false,
            stats: StatsLines::default(),
            fatal: None,
        })
    }

    /// One turn of the loop; `false` once every process has ended (and none is due for
    /// a restart).
    pub(super) fn turn(&mut self, stop: &AtomicBool, reload: &AtomicBool) -> bool {
        self.take_reports();
        self.serve_control();
        self.tell_untold();
        if reload.swap(false, Ordering::Relaxed) && !self.stopping() {
            self.reload_on_signal();
        }
        if stop.load(Ordering::Relaxed) && self.signalled_at.is_none() {
            self.pass_stop_on();
        }
        self.watchdog();
        let capture_ended = self.reap();
        self.note_capture_done(capture_ended);
        self.start_due_restarts();
        let stopping = self.stopping();
        // A stage that has run long enough starts its back-off afresh.
        let reset_after = self.a.restart.reset_after;
        for p in self
            .procs
            .iter_mut()
            .filter(|p| p.status.is_none() && p.up_since.is_some_and(|t| t.elapsed() >= reset_after))
        {
            p.backoff = crate::supervise::BACKOFF_FIRST;
        }
        if self.procs.iter().all(|p| p.status.is_some() && (p.restart_at.is_none() || stopping)) {
            return false;
        }
        self.escalate();
        self.print_stats();
        std::thread::sleep(Duration::from_millis(50));
        true
    }

    /// Whether the run is on its way out: a signal, the end of every camera's stream, a
    /// stage that failed, or the stages told to stop.
    fn stopping(&self) -> bool {
        self.signalled_at.is_some() || self.capture_done_at.is_some() || self.failed_at.is_some() || self.termed
    }

    /// Takes in the reports that came: a report is a process's heartbeat, and its first
    /// says it is set up.
    fn take_reports(&mut self) {
        while let Ok(r) = self.reports.try_recv() {
            if let Some(p) =
                self.procs.iter_mut().find(|p| p.id == r.stage && p.child.id() == r.pid && p.status.is_none())
            {
                p.up_since.get_or_insert_with(Instant::now);
                p.last_report = Instant::now();
            }
            self.stats.fresh.insert(r.stage.clone());
            self.carried.absorb(&self.latest, &r);
            self.latest.insert(r.stage.clone(), r);
        }
    }

    /// A signal asked the run to stop: the stream is ended at capture (the others drain),
    /// or, with capture dead and waiting for its restart, every stage is told to stop.
    fn pass_stop_on(&mut self) {
        self.signalled_at = Some(Instant::now());
        log::info!("stopping: ending the stream at capture");
        let captures: Vec<&Proc> = self.procs.iter().filter(|p| p.is_capture() && p.status.is_none()).collect();
        match captures.is_empty() {
            false => {
                for p in captures {
                    let _ = kill(p.pid(), Signal::SIGTERM);
                    // A stopped process (SIGSTOP, a debugger) takes the SIGTERM only once
                    // it runs again, as systemd's stop does (systemd.kill(5)).
                    let _ = kill(p.pid(), Signal::SIGCONT);
                }
            }
            // Capture is dead, waiting for its restart: nobody can end the stream, so
            // every stage is told to stop.
            true => {
                for p in self.procs.iter().filter(|p| p.status.is_none()) {
                    let _ = kill(p.pid(), Signal::SIGTERM);
                }
            }
        }
    }

    /// The watchdog: a set-up stage that stopped reporting is hung; killed, it restarts.
    fn watchdog(&mut self) {
        let stopping = self.stopping();
        let Some(limit) = self.a.restart.watchdog.filter(|_| !stopping) else { return };
        for p in self.procs.iter_mut().filter(|p| {
            p.status.is_none() && p.watchdog.is_none() && p.up_since.is_some() && p.last_report.elapsed() > limit
        }) {
            let state = process_state(p.child.id());
            let why = format!(
                "sent no report for {:.1} s (process state {state}): hung",
                p.last_report.elapsed().as_secs_f64()
            );
            log::warn!("the {} stage (pid {}) {why}; killing it", p.id, p.child.id());
            let _ = p.child.kill();
            p.watchdog = Some(why);
        }
    }

    /// Reaps the processes that ended and decides what follows each death; whether a
    /// capture stage ended for good.
    fn reap(&mut self) -> bool {
        let stopping = self.stopping();
        let mut capture_ended = false;
        for i in 0..self.procs.len() {
            if self.procs[i].status.is_some() {
                continue;
            }
            if let Ok(Some(s)) = self.procs[i].child.try_wait() {
                capture_ended |= self.on_death(i, s, stopping);
            }
        }
        capture_ended
    }

    /// Process `i` ended with `s`: a clean or secondary end is noted, the display is
    /// restarted or left dead, a stage is restarted or stops the run. Whether it was a
    /// capture stage that ended for good.
    fn on_death(&mut self, i: usize, s: std::process::ExitStatus, stopping: bool) -> bool {
        let policy = self.a.restart;
        let p = &mut self.procs[i];
        let c = code(&s);
        p.status = Some(s);
        if p.retired {
            log::info!("the {} stage (pid {}) stopped: it was removed from the run", p.id, p.child.id());
            return false;
        }
        if std::mem::take(&mut p.planned) && !stopping {
            // A change asked for this death: started again at once, with its new options.
            p.restart_at = Some(std::time::Instant::now());
            p.up_since = None;
            return false;
        }
        // A stage that stopped during set-up because a neighbour refused it or died
        // (exit 3) is secondary: the neighbour's own failure stops the run, and its
        // error line must not be cut short by stopping the run here.
        let secondary = c == EXIT_PEER_GONE && p.up_since.is_none() && p.restarted == 0;
        // A sink (the display, the recorder) is a pure consumer: its death never stops the
        // run. It is restarted like a stage while the policy allows, then left dead.
        if p.is_sink() && c != 0 && !stopping {
            let (role, without) =
                if p.id.role == Role::Record { ("record", "recording") } else { ("display", "a display") };
            match plan_restart(p, &policy, &s) {
                Ok(delay) => log::warn!(
                    "the {role} stage (pid {}) {}; restarting it in {} ms; the pipeline keeps running",
                    p.child.id(),
                    p.last_death,
                    delay.as_millis()
                ),
                Err(why) if why.is_empty() => log::warn!(
                    "the {role} stage could not start (its error is above); the pipeline runs on without {without}"
                ),
                Err(_) => log::warn!(
                    "the {role} stage died {} times (last: {}); the pipeline runs on without {without}",
                    p.restarts.len() + 1,
                    p.last_death
                ),
            }
            return false;
        }
        if c == 0 || stopping || secondary {
            if c != 0 && c != EXIT_PEER_GONE && self.failed_at.is_none() && !self.termed && !p.is_sink() {
                self.failed_at = Some(Instant::now());
            }
            return p.is_capture();
        }
        match plan_restart(p, &policy, &s) {
            Ok(delay) => {
                let limit = if p.forever {
                    "a camera of several is retried for as long as the run lasts".to_string()
                } else {
                    format!("restart {} of at most {} in {} s", p.restarts.len(), policy.max, policy.window.as_secs())
                };
                log::warn!(
                    "the {} stage (pid {}) {}; restarting it alone in {} ms ({limit}); the others keep running",
                    p.id,
                    p.child.id(),
                    p.last_death,
                    delay.as_millis()
                );
            }
            Err(why) => {
                self.fatal.get_or_insert(why);
                if self.failed_at.is_none() {
                    self.failed_at = Some(Instant::now());
                }
            }
        }
        false
    }

    /// Every camera's stream has ended (one camera: its capture stage ended): the others
    /// drain. A camera waiting for its restart when the run stops is not waited for.
    fn note_capture_done(&mut self, capture_ended: bool) {
        let stopping_now = self.signalled_at.is_some() || self.failed_at.is_some() || self.termed;
        if capture_ended
            && self.capture_done_at.is_none()
            && self
                .procs
                .iter()
                .filter(|p| p.is_capture())
                .all(|p| p.status.is_some() && (p.restart_at.is_none() || stopping_now))
        {
            self.capture_done_at = Some(Instant::now());
        }
    }

    /// Starts the restarts that are due (none once the run is stopping).
    fn start_due_restarts(&mut self) {
        self.procs.iter_mut().for_each(Proc::kill_if_due);
        let stopping = self.stopping();
        for p in self.procs.iter_mut().filter(|p| p.restart_at.is_some_and(|t| Instant::now() >= t)) {
            p.restart_at = None;
            let Some(w) = self.report_w.as_ref().filter(|_| !stopping) else { continue };
            match spawn(&self.exe, &p.id, p.args.clone(), &self.a.secret_env, w) {
                Ok(child) => {
                    log::info!("restarted the {} stage: pid {}", p.id, child.id());
                    p.child = child;
                    p.status = None;
                    p.up_since = None;
                    p.last_report = Instant::now();
                    p.watchdog = None;
                    p.restarted += 1;
                }
                Err(e) => {
                    self.fatal.get_or_insert(format!("could not restart the {} stage: {e:#}", p.id));
                    self.failed_at.get_or_insert_with(Instant::now);
                }
            }
        }
    }

    /// Escalation: a failed stage stops the rest at once; otherwise the others get 10 s
    /// to drain after capture ended (or 10 s after a signal), then SIGTERM, then SIGKILL.
    fn escalate(&mut self) {
        let since = |t: Option<Instant>| t.map(|t| t.elapsed());
        // After a signal, stages still in set-up never see an end of stream: 1.5 s is ample
        // for the others to drain once capture is gone.
        let grace = if self.signalled_at.is_some() { Duration::from_millis(1500) } else { Duration::from_secs(10) };
        let drain_over = self.failed_at.is_some()
            || since(self.capture_done_at).is_some_and(|d| d > grace)
            || since(self.signalled_at).is_some_and(|d| d > Duration::from_secs(10));
        if drain_over && !self.termed {
            self.termed = true;
            for p in self.procs.iter().filter(|p| p.status.is_none()) {
                let _ = kill(p.pid(), Signal::SIGTERM);
                let _ = kill(p.pid(), Signal::SIGCONT);
            }
        }
        let term_over = self
            .failed_at
            .or(self.capture_done_at)
            .or(self.signalled_at)
            .is_some_and(|t| t.elapsed() > Duration::from_secs(16));
        if self.termed && term_over && !self.killed {
            self.killed = true;
            for p in self.procs.iter_mut().filter(|p| p.status.is_none()) {
                log::warn!("{} stage did not stop; killing it", p.id);
                let _ = p.child.kill();
            }
        }
    }

    /// The periodic stats line, when one is due (none once a stage failed).
    fn print_stats(&mut self) {
        let Some(every) = self.a.data.stats_interval.filter(|_| self.failed_at.is_none()) else { return };
        let live: Vec<&StageId> = self.procs.iter().filter(|p| p.status.is_none()).map(|p| &p.id).collect();
        let several = self.a.cameras.len() > 1;
        let names: Vec<String> = if several { self.a.cameras.iter().map(|(n, _)| n.clone()).collect() } else { vec![] };
        if let Some(line) = self.stats.due(every, &live, &self.latest, &names, &self.carried) {
            log::info!("{line}");
        }
    }

    /// After the last process ended: the last reports taken in, what the stages left
    /// behind removed, the summary said (and written with `--summary-json`); the run's
    /// exit code.
    pub(super) fn finish(mut self) -> Result<i32> {
        drop(self.report_w.take());
        let _ = self.reader.join();
        while let Ok(r) = self.reports.try_recv() {
            self.carried.absorb(&self.latest, &r);
            self.latest.insert(r.stage.clone(), r);
        }
        // The control socket goes first: no change is taken once the run has ended.
        drop(self.control.take());
        remove_leftovers(&self.a);
        let exit_codes: BTreeMap<StageId, i32> =
            self.procs.iter().map(|p| (p.id.clone(), p.status.as_ref().map(code).unwrap_or(-1))).collect();
        let restarts: BTreeMap<StageId, u32> =
            self.procs.iter().filter(|p| p.restarted > 0).map(|p| (p.id.clone(), p.restarted)).collect();
        let names: Vec<String> = self.a.cameras.iter().map(|(n, _)| n.clone()).collect();
        let cameras = match names.len() > 1 {
            true => camera_summaries(&names, &self.latest, &restarts, &self.carried),
            false => BTreeMap::new(),
        };
        let summary = RunSummary {
            elapsed_s: self.start.elapsed().as_secs_f64(),
            exit_codes,
            stages: self.latest,
            restarts,
            cameras,
            camera_order: names,
        };
        say_summary(&summary, self.fatal.as_deref(), self.a.summary_json.as_deref())?;
        // A sink's failure (the display's, the recorder's) is said, never the run's (it is a pure consumer).
        // Nor is a camera's removed while the run went on (it was killed on purpose).
        let removed: Vec<&StageId> = self.procs.iter().filter(|p| p.retired).map(|p| &p.id).collect();
        let failed = summary
            .exit_codes
            .iter()
            .any(|(s, c)| *c != 0 && *c != EXIT_PEER_GONE && !s.role.is_sink() && !removed.contains(&s));
        if failed {
            // The failing stage printed its own one-line error.
            return Ok(1);
        }
        let peer_gone_without_signal =
            self.signalled_at.is_none() && summary.exit_codes.values().any(|c| *c == EXIT_PEER_GONE);
        Ok(if peer_gone_without_signal { 1 } else { 0 })
    }
}

/// Stages remove their own sockets; a killed one cannot. Only stale sockets go, and the
/// track ids a killed publish stage kept for its successor; then the run directory.
fn remove_leftovers(a: &RunConfig) {
    let run_dir = &a.data.run_dir;
    let _ = std::fs::remove_file(run_dir.join(zcpipe_publish::tracking::TRACK_IDS_FILE));
    let _ = std::fs::remove_file(run_dir.join(zcpipe_publish::tracking::LINE_COUNTS_FILE));
    let mut leftovers: Vec<PathBuf> = std::fs::read_dir(run_dir)
        .map(|rd| rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "sock")).collect())
        .unwrap_or_default();
    leftovers.push(a.publish_socket.clone());
    for p in leftovers {
        let _ = zcpipe_core::link::remove_stale_socket(&p, probe);
    }
    let _ = std::fs::remove_dir(run_dir);
}

/// Says why the run stopped early (`fatal`), prints the summary on stderr, then writes it
/// as JSON to `json` (after the text, so a full disk loses only the file).
fn say_summary(summary: &RunSummary, fatal: Option<&str>, json: Option<&std::path::Path>) -> Result<()> {
    use std::io::Write as _;
    let mut err = std::io::stderr();
    if let Some(why) = fatal.filter(|w| !w.is_empty()) {
        let _ = writeln!(err, "zcpipe: {why}");
    }
    // A run that failed during set-up has no report at all: its one error line says it all.
    if !summary.stages.is_empty() {
        let _ = write!(err, "{}", summary_text(summary));
    }
    let Some(path) = json else { return Ok(()) };
    let text = serde_json::to_string_pretty(summary)?;
    std::fs::write(path, text).map_err(|e| {
        anyhow::anyhow!(
            "--summary-json {}: cannot write the run summary ({}); free space or pass a path you can write (the summary above is complete)",
            path.display(),
            zcpipe_sys::errno_words(&e)
        )
    })
}

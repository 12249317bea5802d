//! `zcpipe run`: the supervisor.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::Serialize;

use zcpipe_core::config::{camera_stage, stage_camera, DataPath};
use zcpipe_core::frame::Stage;
use zcpipe_core::metrics::StageReport;
use zcpipe_core::stage::EXIT_PEER_GONE;

use zcpipe_capture::report::ReconnectFacts;
use zcpipe_display::report::DisplayFacts;
use zcpipe_publish::report::PublishFacts;
use zcpipe_scale::report::ScaleFacts;

/// The fd number children find their report pipe at.
const REPORT_FD: i32 = 3;

/// What a process of a run is: one of the four pipeline stages, or the optional display
/// sink (`zcpipe run --display`), a pure consumer whose failure never stops the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A pipeline stage.
    Stage(Stage),
    /// The display sink (`zcpipe stage display`).
    Display,
}

impl Role {
    /// The word after `zcpipe stage`: `capture`, ..., `display`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Stage(s) => s.name(),
            Role::Display => "display",
        }
    }
}

impl From<Stage> for Role {
    fn from(s: Stage) -> Role {
        Role::Stage(s)
    }
}

const CAPTURE: Role = Role::Stage(Stage::Capture);

struct Proc {
    stage: Role,
    /// The process's name in reports and logs: the stage's, or `capture@NAME` for one camera
    /// of several.
    name: String,
    /// A camera of several: restarted however often it dies (its back-off grows to
    /// [`CAMERA_BACKOFF_MAX`]), so a camera that is gone for a while never stops the others.
    forever: bool,
    child: Child,
    status: Option<ExitStatus>,
    /// Its arguments, for a restart.
    args: Vec<String>,
    /// When this process said it is set up (its first report), if it did.
    up_since: Option<Instant>,
    /// When the stage last died, of the deaths that were restarted within the window.
    restarts: Vec<Instant>,
    /// Restarts over the whole run.
    restarted: u32,
    /// The wait before the next restart.
    backoff: Duration,
    /// A restart due at this time.
    restart_at: Option<Instant>,
    /// How the last process ended (`killed by signal 9 (SIGKILL)`, `exit code 1`).
    last_death: String,
    /// When this process last reported (its heartbeat).
    last_report: Instant,
    /// Why the watchdog killed this process, if it did.
    watchdog: Option<String>,
}

impl Proc {
    fn new(stage: Role, name: String, child: Child, args: Vec<String>, forever: bool) -> Proc {
        Proc {
            stage,
            name,
            forever,
            child,
            status: None,
            args,
            up_since: None,
            restarts: vec![],
            restarted: 0,
            backoff: super::BACKOFF_FIRST,
            restart_at: None,
            last_death: String::new(),
            last_report: Instant::now(),
            watchdog: None,
        }
    }
}

/// A process's state letter from `/proc/PID/stat` with its meaning (proc(5)): `T (stopped)`.
fn process_state(pid: u32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let c = stat.rsplit(')').next().and_then(|r| r.trim_start().chars().next()).unwrap_or('?');
    let what = match c {
        'R' => "running",
        'S' => "sleeping",
        'D' => "waiting on the disk or a device",
        'T' | 't' => "stopped",
        'Z' => "a zombie",
        _ => "unknown",
    };
    format!("{c} ({what})")
}

/// How a stage process ended, in words: `exit code 1`, `killed by signal 9 (SIGKILL)`.
fn death(s: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match s.signal() {
        Some(sig) => format!("killed by signal {sig} ({})", Signal::try_from(sig).map(|s| s.as_str()).unwrap_or("?")),
        None => format!("exit code {}", s.code().unwrap_or(-1)),
    }
}

/// What `zcpipe run` prints at the end (also written as JSON with `--summary-json`).
#[derive(Debug, Serialize)]
pub struct RunSummary {
    /// Wall time of the run, seconds.
    pub elapsed_s: f64,
    /// Exit code of each stage process.
    pub exit_codes: BTreeMap<String, i32>,
    /// Last report of each stage.
    pub stages: BTreeMap<String, StageReport>,
    /// Times each stage was restarted after it died (stages never restarted are left out).
    #[serde(default)]
    pub restarts: BTreeMap<String, u32>,
    /// With several cameras: each camera's totals ([`CameraSummary`]), by name. Empty (and
    /// left out of the JSON) for one camera, whose numbers are the stages'.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cameras: BTreeMap<String, CameraSummary>,
    /// The cameras' names in the order given (the text summary's rows).
    #[serde(skip)]
    pub camera_order: Vec<String>,
}

/// One camera's numbers at the end of a run with several cameras.
#[derive(Debug, Serialize, Default, Clone, PartialEq)]
pub struct CameraSummary {
    /// Frames its capture stage produced (its last process's count).
    pub captured: u64,
    /// Frames dropped in its ring to the scale stage (drop-oldest), plus frames the scale
    /// stage passed over for a newer one of the same camera.
    pub dropped: u64,
    /// Frames of this camera published.
    pub published: u64,
    /// Capture rate, frames per second, first to last frame (`None`: fewer than 2 frames).
    pub fps_captured: Option<f64>,
    /// Publish rate of this camera's frames, frames per second.
    pub fps_published: Option<f64>,
    /// Capture timestamp to published line, µs: median.
    pub latency_p50_us: Option<f64>,
    /// Capture timestamp to published line, µs: 99th percentile.
    pub latency_p99_us: Option<f64>,
    /// Times its capture stage was restarted.
    pub restarts: u32,
}

/// What the processes of a stage that were restarted had counted before they died: their
/// last reports' frames, summed per stage name, so a camera's totals cover the whole run.
#[derive(Debug, Default)]
pub struct Carried {
    /// Frames out of the earlier processes, by stage name.
    frames: BTreeMap<String, u64>,
    /// Frames each camera had published through earlier publish processes, by camera.
    published: BTreeMap<String, u64>,
}

impl Carried {
    /// Takes in report `r`: when it comes from a new process of its stage, the previous
    /// process's last report (in `latest`) is added to the totals.
    pub fn absorb(&mut self, latest: &BTreeMap<String, StageReport>, r: &StageReport) {
        let Some(prev) = latest.get(&r.stage).filter(|p| p.pid != r.pid) else { return };
        *self.frames.entry(r.stage.clone()).or_default() += prev.frames_out;
        if r.stage == "publish" {
            for (name, c) in prev.extra.view::<PublishFacts>().cameras.unwrap_or_default() {
                *self.published.entry(name).or_default() += c.frames;
            }
        }
    }

    /// Frames out of `stage`'s earlier processes.
    pub fn frames(&self, stage: &str) -> u64 {
        self.frames.get(stage).copied().unwrap_or(0)
    }

    /// Frames of `camera` published by earlier publish processes.
    pub fn published(&self, camera: &str) -> u64 {
        self.published.get(camera).copied().unwrap_or(0)
    }
}

/// Frames of camera `n` dropped so far, as its last reports count them: its ring's
/// drop-oldest drops, and the frames the scale stage passed over for a newer one or that
/// were dropped after the scale stage.
fn camera_dropped(latest: &BTreeMap<String, StageReport>, n: &str) -> u64 {
    let ring = latest.get(&camera_stage(n)).and_then(|r| r.output_ring).map_or(0, |c| c.dropped);
    let scale = latest.get("scale").and_then(|r| r.extra.view::<ScaleFacts>().cameras.remove(n)).unwrap_or_default();
    ring + scale.skipped_for_newer + scale.dropped_downstream
}

/// Each camera's [`CameraSummary`] from the last reports (`latest`, by stage name) of a run
/// with cameras `names` (more than one; their capture stages report as `capture@NAME`).
pub fn camera_summaries(
    names: &[String],
    latest: &BTreeMap<String, StageReport>,
    restarts: &BTreeMap<String, u32>,
    carried: &Carried,
) -> BTreeMap<String, CameraSummary> {
    let publish_cams = latest.get("publish").and_then(|r| r.extra.view::<PublishFacts>().cameras).unwrap_or_default();
    names
        .iter()
        .map(|n| {
            let stage = camera_stage(n);
            let cap = latest.get(&stage);
            let pc = publish_cams.get(n);
            let total = pc.and_then(|c| c.latency.get("total"));
            let summary = CameraSummary {
                captured: carried.frames(&stage) + cap.map(|r| r.frames_out).unwrap_or(0),
                dropped: camera_dropped(latest, n),
                published: carried.published(n) + pc.map_or(0, |c| c.frames),
                fps_captured: cap.and_then(fps),
                fps_published: pc.and_then(|c| c.out_span.fps()),
                latency_p50_us: total.map(|t| t.p50_us),
                latency_p99_us: total.map(|t| t.p99_us),
                restarts: restarts.get(&stage).copied().unwrap_or(0),
            };
            (n.clone(), summary)
        })
        .collect()
}

/// A checked `zcpipe run`: built by the command line, which has checked every stage's
/// options as the stage would.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The data path every stage shares (run directory, stats interval, ...).
    pub data: DataPath,
    /// Each stage's arguments after `zcpipe stage <name>`, in start order; the supervisor
    /// adds `--report-fd`.
    pub stage_flags: Vec<(Role, String, Vec<String>)>,
    /// The detections socket the publish stage binds (removed if left behind).
    pub publish_socket: std::path::PathBuf,
    /// `--summary-json`: where to write the run summary as JSON too.
    pub summary_json: Option<std::path::PathBuf>,
    /// What the run uses and why (printed before the stages start).
    pub plan: crate::plan::Plan,
    /// When a stage that died is restarted.
    pub restart: super::RestartPolicy,
    /// The cameras: name and source (credentials redacted), in order; one for a single camera.
    pub cameras: Vec<(String, String)>,
    /// Secrets the stages get in their environment, never on their command lines (which
    /// every local user reads in `/proc/PID/cmdline`; a process's environment only its own
    /// user, proc(5)): (variable, value), e.g. the MQTT password.
    pub secret_env: Vec<(String, String)>,
}

fn probe(p: &std::path::Path) -> Option<()> {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let addr = UnixAddr::new(p).ok()?;
    [SockType::SeqPacket, SockType::Stream].into_iter().find_map(|t| {
        let fd = socket(AddressFamily::Unix, t, SockFlag::SOCK_CLOEXEC, None).ok()?;
        connect(fd.as_raw_fd(), &addr).ok()
    })
}

/// A socket in `dir` that something is listening on, if any.
fn live_socket_in(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "sock") && probe(p).is_some())
}

fn spawn(
    exe: &std::path::Path,
    stage: Role,
    name: &str,
    args: Vec<String>,
    env: &[(String, String)],
    report_w: &OwnedFd,
) -> Result<Child> {
    let mut cmd = Command::new(exe);
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd.arg("stage").arg(stage.name()).args(&args).stdin(Stdio::null()).stderr(Stdio::inherit());
    cmd.stdout(if stage == Role::Stage(Stage::Publish) { Stdio::inherit() } else { Stdio::null() });
    if std::env::var_os("RUST_LOG").is_none() {
        let lvl = log::max_level().to_string().to_lowercase();
        cmd.env("RUST_LOG", format!("zcpipe={lvl},warn"));
    }
    let w = report_w.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (setpgid, prctl, dup2, fcntl) on fds we own.
    unsafe {
        cmd.pre_exec(move || {
            // Own process group: a terminal's Ctrl-C goes to the supervisor alone.
            libc::setpgid(0, 0);
            // Die with the supervisor: no orphan stages.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            if libc::getppid() == 1 {
                return Err(std::io::Error::other("supervisor already gone"));
            }
            if w == REPORT_FD {
                libc::fcntl(REPORT_FD, libc::F_SETFD, 0);
            } else if libc::dup2(w, REPORT_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // A camera's URL may hold its password: never in a log line.
    let shown: Vec<String> = args
        .iter()
        .map(|a| {
            a.strip_prefix("--source=")
                .map_or_else(|| a.clone(), |u| format!("--source={}", zcpipe_capture::spec::redact_url(u)))
        })
        .collect();
    log::debug!("starting: {} stage {} {} ({name})", exe.display(), stage.name(), shown.join(" "));
    cmd.spawn().with_context(|| format!("starting the {name} stage ({})", exe.display()))
}

fn code(s: &ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

/// Runs the pipeline; returns the exit code (0 if every stage ended cleanly).
pub fn run(a: RunConfig, stop: &AtomicBool) -> Result<i32> {
    let run_dir = a.data.run_dir.clone();
    zcpipe_core::config::private_dir(&run_dir)?;
    let exe = std::env::current_exe().context("finding the zcpipe binary")?;
    if let Some(live) = live_socket_in(&run_dir) {
        anyhow::bail!(
            "{} is in use by a running zcpipe ({}); stop it, or choose another --instance or --run-dir",
            run_dir.display(),
            live.display()
        );
    }
    let (report_r, report_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).context("pipe2")?;
    let start = Instant::now();
    let mut procs: Vec<Proc> = vec![];
    let several = a.cameras.len() > 1;
    for (stage, name, args) in &a.stage_flags {
        let mut args = args.clone();
        args.push(format!("--report-fd={REPORT_FD}"));
        match spawn(&exe, *stage, name, args.clone(), &a.secret_env, &report_w) {
            Ok(child) => procs.push(Proc::new(*stage, name.clone(), child, args, several && *stage == CAPTURE)),
            Err(e) => {
                for p in &mut procs {
                    let _ = p.child.kill();
                    let _ = p.child.wait();
                }
                return Err(e);
            }
        }
    }
    // Kept open: a restarted stage gets the same pipe (the reader ends when the last
    // process holding it is gone and this is dropped, below).
    let mut report_w = Some(report_w);
    let (tx, rx) = mpsc::channel::<StageReport>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(std::fs::File::from(report_r)).lines().map_while(|l| l.ok()) {
            match serde_json::from_str::<StageReport>(&line) {
                Ok(r) => {
                    if tx.send(r).is_err() {
                        break;
                    }
                }
                Err(e) => log::debug!("unparsable stage report ({e}): {line}"),
            }
        }
    });

    let mut latest: BTreeMap<String, StageReport> = BTreeMap::new();
    let mut carried = Carried::default();
    let mut signalled_at: Option<Instant> = None;
    let mut failed_at: Option<Instant> = None;
    let mut capture_done_at: Option<Instant> = None;
    let mut termed = false;
    let mut killed = false;
    let mut stats = StatsLines::default();
    let stats_every = a.data.stats_interval;
    // Why the run stopped early, when a stage died and was not restarted.
    let mut fatal: Option<String> = None;
    loop {
        while let Ok(r) = rx.try_recv() {
            if let Some(p) = procs.iter_mut().find(|p| p.name == r.stage && p.child.id() == r.pid && p.status.is_none())
            {
                p.up_since.get_or_insert_with(Instant::now);
                p.last_report = Instant::now();
            }
            stats.fresh.insert(r.stage.clone());
            carried.absorb(&latest, &r);
            latest.insert(r.stage.clone(), r);
        }
        if stop.load(Ordering::Relaxed) && signalled_at.is_none() {
            signalled_at = Some(Instant::now());
            log::info!("stopping: ending the stream at capture");
            let captures: Vec<&Proc> = procs.iter().filter(|p| p.stage == CAPTURE && p.status.is_none()).collect();
            match captures.is_empty() {
                false => {
                    for p in captures {
                        let pid = Pid::from_raw(p.child.id() as i32);
                        let _ = kill(pid, Signal::SIGTERM);
                        // A stopped process (SIGSTOP, a debugger) takes the SIGTERM only once
                        // it runs again, as systemd's stop does (systemd.kill(5)).
                        let _ = kill(pid, Signal::SIGCONT);
                    }
                }
                // Capture is dead, waiting for its restart: nobody can end the stream, so
                // every stage is told to stop.
                true => {
                    for p in procs.iter().filter(|p| p.status.is_none()) {
                        let _ = kill(Pid::from_raw(p.child.id() as i32), Signal::SIGTERM);
                    }
                }
            }
        }
        let stopping = signalled_at.is_some() || capture_done_at.is_some() || failed_at.is_some() || termed;
        // The watchdog: a set-up stage that stopped reporting is hung; killed, it restarts.
        if let Some(limit) = a.restart.watchdog.filter(|_| !stopping) {
            for p in procs.iter_mut().filter(|p| {
                p.status.is_none() && p.watchdog.is_none() && p.up_since.is_some() && p.last_report.elapsed() > limit
            }) {
                let state = process_state(p.child.id());
                let why = format!(
                    "sent no report for {:.1} s (process state {state}): hung",
                    p.last_report.elapsed().as_secs_f64()
                );
                log::warn!("the {} stage (pid {}) {why}; killing it", p.name, p.child.id());
                let _ = p.child.kill();
                p.watchdog = Some(why);
            }
        }
        let mut capture_ended = false;
        for p in procs.iter_mut().filter(|p| p.status.is_none()) {
            if let Ok(Some(s)) = p.child.try_wait() {
                let c = code(&s);
                p.status = Some(s);
                // A stage that stopped during set-up because a neighbour refused it or died
                // (exit 3) is secondary: the neighbour's own failure stops the run, and its
                // error line must not be cut short by stopping the run here.
                let secondary = c == EXIT_PEER_GONE && p.up_since.is_none() && p.restarted == 0;
                // The display is a pure consumer: its death never stops the run. It is
                // restarted like a stage while the policy allows, then left dead.
                if p.stage == Role::Display && c != 0 && !stopping {
                    match plan_restart(p, &a.restart, &s) {
                        Ok(delay) => log::warn!("the display stage (pid {}) {}; restarting it in {} ms; the pipeline keeps running", p.child.id(), p.last_death, delay.as_millis()),
                        Err(why) if why.is_empty() => log::warn!("the display stage could not start (its error is above); the pipeline runs on without a display"),
                        Err(_) => log::warn!("the display stage died {} times (last: {}); the pipeline runs on without a display", p.restarts.len() + 1, p.last_death),
                    }
                    continue;
                }
                if c == 0 || stopping || secondary {
                    if c != 0 && c != EXIT_PEER_GONE && failed_at.is_none() && !termed && p.stage != Role::Display {
                        failed_at = Some(Instant::now());
                    }
                    capture_ended |= p.stage == CAPTURE;
                    continue;
                }
                match plan_restart(p, &a.restart, &s) {
                    Ok(delay) => {
                        let limit = if p.forever {
                            "a camera of several is retried for as long as the run lasts".to_string()
                        } else {
                            format!(
                                "restart {} of at most {} in {} s",
                                p.restarts.len(),
                                a.restart.max,
                                a.restart.window.as_secs()
                            )
                        };
                        log::warn!(
                            "the {} stage (pid {}) {}; restarting it alone in {} ms ({limit}); the others keep running",
                            p.name,
                            p.child.id(),
                            p.last_death,
                            delay.as_millis()
                        );
                    }
                    Err(why) => {
                        fatal.get_or_insert(why);
                        if failed_at.is_none() {
                            failed_at = Some(Instant::now());
                        }
                    }
                }
            }
        }
        // Every camera's stream has ended (one camera: its capture stage ended): the others drain.
        // A camera waiting for its restart when the run stops is not waited for.
        let stopping_now = signalled_at.is_some() || failed_at.is_some() || termed;
        if capture_ended
            && capture_done_at.is_none()
            && procs
                .iter()
                .filter(|p| p.stage == CAPTURE)
                .all(|p| p.status.is_some() && (p.restart_at.is_none() || stopping_now))
        {
            capture_done_at = Some(Instant::now());
        }
        // Restarts that are due (none once the run is stopping).
        let stopping = signalled_at.is_some() || capture_done_at.is_some() || failed_at.is_some() || termed;
        for p in procs.iter_mut().filter(|p| p.restart_at.is_some_and(|t| Instant::now() >= t)) {
            p.restart_at = None;
            let Some(w) = report_w.as_ref().filter(|_| !stopping) else { continue };
            match spawn(&exe, p.stage, &p.name, p.args.clone(), &a.secret_env, w) {
                Ok(child) => {
                    log::info!("restarted the {} stage: pid {}", p.name, child.id());
                    p.child = child;
                    p.status = None;
                    p.up_since = None;
                    p.last_report = Instant::now();
                    p.watchdog = None;
                    p.restarted += 1;
                }
                Err(e) => {
                    fatal.get_or_insert(format!("could not restart the {} stage: {e:#}", p.name));
                    failed_at.get_or_insert_with(Instant::now);
                }
            }
        }
        // A stage that has run long enough starts its back-off afresh.
        for p in procs
            .iter_mut()
            .filter(|p| p.status.is_none() && p.up_since.is_some_and(|t| t.elapsed() >= a.restart.reset_after))
        {
            p.backoff = super::BACKOFF_FIRST;
        }
        if procs.iter().all(|p| p.status.is_some() && (p.restart_at.is_none() || stopping)) {
            break;
        }
        // Escalation: a failed stage stops the rest at once; otherwise the others get 10 s
        // to drain after capture ended (or 10 s after a signal), then SIGTERM, then SIGKILL.
        let since = |t: Option<Instant>| t.map(|t| t.elapsed());
        // After a signal, stages still in set-up never see an end of stream: 1.5 s is ample
        // for the others to drain once capture is gone.
        let grace = if signalled_at.is_some() { Duration::from_millis(1500) } else { Duration::from_secs(10) };
        let drain_over = failed_at.is_some()
            || since(capture_done_at).is_some_and(|d| d > grace)
            || since(signalled_at).is_some_and(|d| d > Duration::from_secs(10));
        if drain_over && !termed {
            termed = true;
            for p in procs.iter().filter(|p| p.status.is_none()) {
                let _ = kill(Pid::from_raw(p.child.id() as i32), Signal::SIGTERM);
                let _ = kill(Pid::from_raw(p.child.id() as i32), Signal::SIGCONT);
            }
        }
        let term_over =
            failed_at.or(capture_done_at).or(signalled_at).is_some_and(|t| t.elapsed() > Duration::from_secs(16));
        if termed && term_over && !killed {
            killed = true;
            for p in procs.iter_mut().filter(|p| p.status.is_none()) {
                log::warn!("{} stage did not stop; killing it", p.name);
                let _ = p.child.kill();
            }
        }
        if let Some(every) = stats_every.filter(|_| failed_at.is_none()) {
            let live: Vec<&str> = procs.iter().filter(|p| p.status.is_none()).map(|p| p.name.as_str()).collect();
            let names: Vec<String> = if several { a.cameras.iter().map(|(n, _)| n.clone()).collect() } else { vec![] };
            if let Some(line) = stats.due(every, &live, &latest, &names, &carried) {
                log::info!("{line}");
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(report_w.take());
    let _ = reader.join();
    while let Ok(r) = rx.try_recv() {
        carried.absorb(&latest, &r);
        latest.insert(r.stage.clone(), r);
    }
    // Stages remove their own sockets; a killed one cannot. Only stale sockets go, and the
    // track ids a killed publish stage kept for its successor.
    let _ = std::fs::remove_file(run_dir.join(zcpipe_publish::stage::TRACK_IDS_FILE));
    let mut leftovers: Vec<std::path::PathBuf> = std::fs::read_dir(&run_dir)
        .map(|rd| rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "sock")).collect())
        .unwrap_or_default();
    leftovers.push(a.publish_socket.clone());
    for p in leftovers {
        let _ = zcpipe_core::link::remove_stale_socket(&p, probe);
    }
    let _ = std::fs::remove_dir(&run_dir);

    let exit_codes: BTreeMap<String, i32> =
        procs.iter().map(|p| (p.name.clone(), p.status.as_ref().map(code).unwrap_or(-1))).collect();
    let restarts: BTreeMap<String, u32> =
        procs.iter().filter(|p| p.restarted > 0).map(|p| (p.name.clone(), p.restarted)).collect();
    let names: Vec<String> = a.cameras.iter().map(|(n, _)| n.clone()).collect();
    let cameras = if several { camera_summaries(&names, &latest, &restarts, &carried) } else { BTreeMap::new() };
    let summary = RunSummary {
        elapsed_s: start.elapsed().as_secs_f64(),
        exit_codes: exit_codes.clone(),
        stages: latest,
        restarts,
        cameras,
        camera_order: names.clone(),
    };
    // The display's failure is said, never the run's (it is a pure consumer).
    let failed: Vec<&String> = exit_codes
        .iter()
        .filter(|(s, c)| **c != 0 && **c != EXIT_PEER_GONE && s.as_str() != "display")
        .map(|(s, _)| s)
        .collect();
    // Written after the text summary is printed, so a full disk loses only the file.
    let write_json = |path: &std::path::Path| -> Result<()> {
        let json = serde_json::to_string_pretty(&summary)?;
        std::fs::write(path, json).map_err(|e| {
            anyhow::anyhow!(
                "--summary-json {}: cannot write the run summary ({}); free space or pass a path you can write (the summary above is complete)",
                path.display(),
                zcpipe_sys::errno_words(&e)
            )
        })
    };
    use std::io::Write as _;
    let mut err = std::io::stderr();
    if let Some(why) = fatal.as_ref().filter(|w| !w.is_empty()) {
        let _ = writeln!(err, "zcpipe: {why}");
    }
    // A run that failed during set-up has no report at all: its one error line says it all.
    if !summary.stages.is_empty() {
        let _ = write!(err, "{}", summary_text(&summary));
    }
    if let Some(path) = &a.summary_json {
        write_json(path)?;
    }
    if !failed.is_empty() {
        // The failing stage printed its own one-line error.
        return Ok(1);
    }
    let peer_gone_without_signal = signalled_at.is_none() && exit_codes.values().any(|c| *c == EXIT_PEER_GONE);
    Ok(if peer_gone_without_signal { 1 } else { 0 })
}

/// Decides what follows the death (`s`) of `p`, a stage whose run was not stopping: a
/// restart after its back-off (`Ok(the wait)`, scheduled in `p`), or, if it never got set
/// up (a configuration error, said by the stage itself) or died more than `policy` allows,
/// `Err(the line that says why the run stops)`.
fn plan_restart(p: &mut Proc, policy: &super::RestartPolicy, s: &ExitStatus) -> std::result::Result<Duration, String> {
    p.last_death = match &p.watchdog {
        Some(why) => format!("{why}, killed by the watchdog (--watchdog)"),
        None => death(s),
    };
    let name = p.name.clone();
    if p.up_since.is_none() && p.restarted == 0 {
        // A stage that cannot start is not restarted. An exit code comes with the stage's
        // own error line, which says it all; a signal is news.
        use std::os::unix::process::ExitStatusExt;
        return Err(if s.signal().is_some() {
            format!("the {name} stage was {} during set-up; stopped the others", p.last_death)
        } else {
            String::new()
        });
    }
    if policy.max == 0 {
        return Err(format!("the {name} stage was {}; stopped the others (--restart-max 0)", p.last_death)
            .replace("was exit code", "ended with exit code"));
    }
    let now = Instant::now();
    p.restarts.retain(|t| now.duration_since(*t) < policy.window);
    if p.forever {
        // A camera of several: gone for a while (unplugged, its network down), retried with
        // a back-off that grows to CAMERA_BACKOFF_MAX, never given up on.
        let delay = p.backoff;
        p.backoff = (p.backoff * 2).min(CAMERA_BACKOFF_MAX);
        p.restart_at = Some(now + delay);
        return Ok(delay);
    }
    if p.restarts.len() as u32 >= policy.max {
        return Err(format!(
            "the {name} stage died {} times within {} s (last: {}); gave up restarting it (--restart-max {}, --restart-window {}) and stopped the others",
            p.restarts.len() + 1,
            policy.window.as_secs(),
            p.last_death,
            policy.max,
            policy.window.as_secs()
        ));
    }
    p.restarts.push(now);
    let delay = p.backoff;
    p.backoff = (p.backoff * 2).min(super::BACKOFF_MAX);
    p.restart_at = Some(now + delay);
    Ok(delay)
}

/// The longest wait before restarting the capture stage of one camera of several (a camera
/// that is gone is retried this often at most).
pub const CAMERA_BACKOFF_MAX: Duration = Duration::from_secs(30);

mod summary;
pub use summary::summary_text;
use summary::*;

#[cfg(test)]
mod tests {
    use super::*;
    use zcpipe_core::metrics::FrameSpan;

    fn report(stage: &str, frames: u64, first_s: f64, last_s: f64) -> StageReport {
        StageReport {
            stage: stage.into(),
            frames_out: frames,
            out_span: Some(FrameSpan { frames, first_s, last_s }),
            ..Default::default()
        }
    }

    fn ago(s: u64) -> Option<Instant> {
        Instant::now().checked_sub(Duration::from_secs(s))
    }

    /// A stats line waits until every live stage has reported since the last one, never
    /// repeats stale counts, gives rates since the previous line, and does not wait for
    /// ever on a stuck stage.
    #[test]
    fn stats_lines_wait_for_fresh_reports_and_rate_the_interval() {
        let every = Duration::from_secs(10);
        let live = ["capture", "scale", "infer", "publish"];
        let mut latest = BTreeMap::new();
        for (s, n) in [("capture", 31), ("scale", 31), ("infer", 31), ("publish", 31)] {
            latest.insert(s.to_string(), report(s, n, 0.5, 1.5));
        }
        let mut st = StatsLines::default();
        st.fresh.extend(["capture".to_string(), "scale".to_string()]);
        assert_eq!(
            st.due(every, &live, &latest, &[], &Carried::default()),
            None,
            "infer and publish have not reported yet"
        );
        st.fresh.extend(live.map(String::from));
        let line = st.due(every, &live, &latest, &[], &Carried::default()).expect("all fresh");
        assert!(line.contains("capture 31 frames 30.0 fps | published 31 frames 30.0 fps"), "{line}");
        assert_eq!(st.due(every, &live, &latest, &[], &Carried::default()), None, "an interval has not passed");
        st.last = ago(12);
        assert_eq!(st.due(every, &live, &latest, &[], &Carried::default()), None, "nothing new: no stale repeat");
        // 15 more frames in the next second at capture, 5 at publish.
        latest.insert("capture".into(), report("capture", 46, 0.5, 2.5));
        latest.insert("publish".into(), report("publish", 36, 0.5, 2.5));
        st.fresh.extend(live.map(String::from));
        let line = st.due(every, &live, &latest, &[], &Carried::default()).expect("all fresh again");
        assert!(line.contains("capture 46 frames 15.0 fps | published 36 frames 5.0 fps"), "{line}");
        // A stuck stage: after two intervals, one fresh report is enough.
        st.last = ago(12);
        st.fresh.insert("capture".into());
        assert_eq!(st.due(every, &live, &latest, &[], &Carried::default()), None);
        st.last = ago(21);
        let line = st.due(every, &live, &latest, &[], &Carried::default()).expect("two intervals passed");
        assert!(line.contains("capture 46 frames - fps"), "no new capture frame since: {line}");
    }
}

//! `zcpipe run`: the supervisor.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::Serialize;

use crate::cli::{RunArgs, EXIT_PEER_GONE};
use crate::core::frame::Stage;
use crate::metrics::StageReport;

use super::STOP;

/// The fd number children find their report pipe at.
const REPORT_FD: i32 = 3;

struct Proc {
    stage: Stage,
    child: Child,
    status: Option<ExitStatus>,
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
}

fn common_args(a: &RunArgs, run_dir: &std::path::Path) -> Vec<String> {
    let c = &a.pipeline.common;
    let mut out = vec![format!("--run-dir={}", run_dir.display()), format!("--instance={}", c.instance)];
    out.extend(c.data_path_flags());
    out.extend([
        format!("--stats-interval={}", c.stats_interval),
        format!("--connect-timeout={}", c.connect_timeout),
        format!("--report-fd={REPORT_FD}"),
    ]);
    out
}

fn stage_args(a: &RunArgs, stage: Stage) -> Vec<String> {
    match stage {
        Stage::Capture => a.pipeline.capture.flags(),
        Stage::Scale => a.pipeline.scale.flags(),
        Stage::Infer => a.pipeline.infer.flags(),
        Stage::Publish => {
            let print = if a.json { "json" } else if a.no_print { "none" } else { "human" };
            let mut v: Vec<String> = a.publish.iter().map(|p| format!("--publish={}", p.display())).collect();
            v.push(format!("--print={print}"));
            v
        }
    }
}

/// Checks what `run` can check before starting anything, so a bad value is one line from
/// the supervisor rather than a failure inside a child.
fn preflight(a: &RunArgs) -> Result<()> {
    a.pipeline.capture.source.parse::<crate::capture::spec::SourceSpec>()?;
    if let Some(f) = a.pipeline.capture.fps {
        if !(f > 0.0 && f.is_finite()) {
            anyhow::bail!("--fps {f}: use a positive frame rate");
        }
    }
    for (name, v) in [("--buffers", a.pipeline.capture.buffers), ("--scale-buffers", a.pipeline.scale.scale_buffers)] {
        if !(2..=64).contains(&v) {
            anyhow::bail!("{name} {v}: use 2..=64");
        }
    }
    for (name, v) in [("--score-threshold", a.pipeline.infer.score_threshold), ("--nms-iou", a.pipeline.infer.nms_iou)] {
        if !(0.0..=1.0).contains(&v) {
            anyhow::bail!("{name} {v}: use a value in 0..=1");
        }
    }
    if !crate::infer::DETECTOR_KINDS.contains(&a.pipeline.infer.infer.as_str()) {
        anyhow::bail!("unknown inference backend `{}`: valid backends are {}", a.pipeline.infer.infer, crate::infer::DETECTOR_KINDS.join(", "));
    }
    Ok(())
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
    std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).find(|p| p.extension().is_some_and(|x| x == "sock") && probe(p).is_some())
}

fn spawn(exe: &std::path::Path, stage: Stage, args: Vec<String>, report_w: &OwnedFd) -> Result<Child> {
    let mut cmd = Command::new(exe);
    cmd.arg("stage").arg(stage.name()).args(args).stdin(Stdio::null()).stderr(Stdio::inherit());
    cmd.stdout(if stage == Stage::Publish { Stdio::inherit() } else { Stdio::null() });
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
    cmd.spawn().with_context(|| format!("starting the {} stage ({})", stage.name(), exe.display()))
}

fn code(s: &ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

/// Runs the pipeline; returns the exit code (0 if every stage ended cleanly).
pub fn run(a: RunArgs) -> Result<i32> {
    let run_dir = a.pipeline.common.run_dir();
    preflight(&a)?;
    std::fs::create_dir_all(&run_dir).with_context(|| format!("creating run directory {}", run_dir.display()))?;
    let exe = std::env::current_exe().context("finding the zcpipe binary")?;
    if let Some(live) = live_socket_in(&run_dir) {
        anyhow::bail!("{} is in use by a running zcpipe ({}); stop it, or choose another --instance or --run-dir", run_dir.display(), live.display());
    }
    let (report_r, report_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).context("pipe2")?;
    let common = common_args(&a, &run_dir);
    let start = Instant::now();
    let mut procs: Vec<Proc> = vec![];
    for stage in Stage::ALL {
        let mut args = common.clone();
        args.extend(stage_args(&a, stage));
        match spawn(&exe, stage, args, &report_w) {
            Ok(child) => procs.push(Proc { stage, child, status: None }),
            Err(e) => {
                for p in &mut procs {
                    let _ = p.child.kill();
                    let _ = p.child.wait();
                }
                return Err(e);
            }
        }
    }
    drop(report_w);
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
    let mut signalled_at: Option<Instant> = None;
    let mut failed_at: Option<Instant> = None;
    let mut capture_done_at: Option<Instant> = None;
    let mut termed = false;
    let mut killed = false;
    let mut last_stats = Instant::now();
    let stats_every = a.pipeline.common.stats_interval();
    loop {
        while let Ok(r) = rx.try_recv() {
            latest.insert(r.stage.clone(), r);
        }
        if STOP.load(Ordering::Relaxed) && signalled_at.is_none() {
            signalled_at = Some(Instant::now());
            log::info!("stopping: ending the stream at capture");
            if let Some(p) = procs.iter().find(|p| p.stage == Stage::Capture && p.status.is_none()) {
                let _ = kill(Pid::from_raw(p.child.id() as i32), Signal::SIGTERM);
            }
        }
        for p in procs.iter_mut().filter(|p| p.status.is_none()) {
            if let Ok(Some(s)) = p.child.try_wait() {
                let c = code(&s);
                if c != 0 && c != EXIT_PEER_GONE && failed_at.is_none() {
                    failed_at = Some(Instant::now());
                }
                if p.stage == Stage::Capture {
                    capture_done_at = Some(Instant::now());
                }
                p.status = Some(s);
            }
        }
        if procs.iter().all(|p| p.status.is_some()) {
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
            }
        }
        let term_over = failed_at.or(capture_done_at).or(signalled_at).is_some_and(|t| t.elapsed() > Duration::from_secs(16));
        if termed && term_over && !killed {
            killed = true;
            for p in procs.iter_mut().filter(|p| p.status.is_none()) {
                log::warn!("{} stage did not stop; killing it", p.stage.name());
                let _ = p.child.kill();
            }
        }
        if stats_every.is_some_and(|e| last_stats.elapsed() >= e) && failed_at.is_none() {
            last_stats = Instant::now();
            if latest.len() == Stage::ALL.len() {
                log::info!("{}", stats_line(&latest));
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = reader.join();
    while let Ok(r) = rx.try_recv() {
        latest.insert(r.stage.clone(), r);
    }
    // Stages remove their own sockets; a killed one cannot. Only stale sockets go.
    let mut leftovers: Vec<std::path::PathBuf> = std::fs::read_dir(&run_dir)
        .map(|rd| rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "sock")).collect())
        .unwrap_or_default();
    leftovers.push(a.publish.clone().unwrap_or_else(crate::publish::default_socket_path));
    for p in leftovers {
        let _ = crate::core::link::remove_stale_socket(&p, probe);
    }
    let _ = std::fs::remove_dir(&run_dir);

    let exit_codes: BTreeMap<String, i32> = procs.iter().map(|p| (p.stage.name().to_string(), p.status.as_ref().map(code).unwrap_or(-1))).collect();
    let summary = RunSummary { elapsed_s: start.elapsed().as_secs_f64(), exit_codes: exit_codes.clone(), stages: latest };
    let failed: Vec<&String> = exit_codes.iter().filter(|(_, c)| **c != 0 && **c != EXIT_PEER_GONE).map(|(s, _)| s).collect();
    if let Some(path) = &a.summary_json {
        std::fs::write(path, serde_json::to_string_pretty(&summary)?).with_context(|| format!("writing {}", path.display()))?;
    }
    use std::io::Write as _;
    let mut err = std::io::stderr();
    for p in &procs {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = p.status.as_ref().and_then(|s| s.signal()) {
            // Our own SIGTERM (forwarded) or our own kill is expected; anything else is news.
            let expected = killed || (termed && sig == libc::SIGTERM);
            if !expected {
                let name = Signal::try_from(sig).map(|s| s.as_str()).unwrap_or("?");
                let _ = writeln!(err, "zcpipe: the {} stage was killed by signal {sig} ({name}); stopped the others", p.stage.name());
            }
        }
    }
    if summary.stages.contains_key("capture") {
        let _ = write!(err, "{}", summary_text(&summary));
    }
    if !failed.is_empty() {
        // The failing stage printed its own one-line error.
        return Ok(1);
    }
    let peer_gone_without_signal = signalled_at.is_none() && exit_codes.values().any(|c| *c == EXIT_PEER_GONE);
    Ok(if peer_gone_without_signal { 1 } else { 0 })
}

fn fps(r: &StageReport, n: u64) -> f64 {
    if r.elapsed_s > 0.0 {
        n as f64 / r.elapsed_s
    } else {
        0.0
    }
}

fn drops(latest: &BTreeMap<String, StageReport>, stage: &str) -> u64 {
    latest.get(stage).and_then(|r| r.output_ring).map(|c| c.dropped).unwrap_or(0)
}

/// The periodic stats line.
pub fn stats_line(latest: &BTreeMap<String, StageReport>) -> String {
    let cap = latest.get("capture");
    let publ = latest.get("publish");
    format!(
        "stats: capture {} frames {:.1} fps | published {} frames {:.1} fps | dropped capture->scale {}, scale->infer {}, infer->publish {}",
        cap.map(|r| r.frames_out).unwrap_or(0),
        cap.map(|r| fps(r, r.frames_out)).unwrap_or(0.0),
        publ.map(|r| r.frames_out).unwrap_or(0),
        publ.map(|r| fps(r, r.frames_out)).unwrap_or(0.0),
        drops(latest, "capture"),
        drops(latest, "scale"),
        drops(latest, "infer"),
    )
}

/// The end-of-run summary, as printed on stderr.
pub fn summary_text(s: &RunSummary) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "zcpipe summary ({:.1} s):", s.elapsed_s);
    let get = |n: &str| s.stages.get(n);
    let _ = writeln!(
        o,
        "  frames: captured {}, scaled {}, inferred {}, published {}",
        get("capture").map(|r| r.frames_out).unwrap_or(0),
        get("scale").map(|r| r.frames_out).unwrap_or(0),
        get("infer").map(|r| r.frames_out).unwrap_or(0),
        get("publish").map(|r| r.frames_out).unwrap_or(0),
    );
    for (stage, name) in [("capture", "capture->scale"), ("scale", "scale->infer"), ("infer", "infer->publish")] {
        if let Some(c) = get(stage).and_then(|r| r.output_ring) {
            let _ = writeln!(
                o,
                "  ring {name:<15} produced {:>6}  consumed {:>6}  dropped {:>6}  rejected {}  in flight {}",
                c.produced, c.consumed, c.dropped, c.rejected, c.in_flight
            );
        }
    }
    if let (Some(c), Some(p)) = (get("capture"), get("publish")) {
        let _ = writeln!(o, "  fps: captured {:.1}, published {:.1}", fps(c, c.frames_out), fps(p, p.frames_out));
    }
    for (up, down, name) in [("capture", "scale", "capture->scale"), ("scale", "infer", "scale->infer")] {
        let (u, d) = (get(up).and_then(|r| r.copy_out), get(down).and_then(|r| r.copy_in));
        if let (Some(u), Some(d)) = (u, d) {
            let per = (u.copied_bytes + d.copied_bytes).checked_div(u.frames).unwrap_or(0);
            let _ = writeln!(
                o,
                "  copies {name:<15} zcpipe {} bytes ({per} per frame), socket calls {} bytes",
                u.copied_bytes + d.copied_bytes,
                u.socket_bytes + d.socket_bytes
            );
        }
    }
    let cpu: Vec<String> = crate::core::frame::Stage::ALL
        .iter()
        .filter_map(|st| {
            let r = get(st.name())?;
            let p = r.process?;
            let n = r.frames_in.max(1);
            Some(format!("{} {:.0} µs/frame {} MiB", st.name(), (p.user_us + p.system_us) as f64 / n as f64, p.pss_kib / 1024))
        })
        .collect();
    if !cpu.is_empty() {
        let _ = writeln!(o, "  cpu and Pss: {}", cpu.join(", "));
    }
    if let Some(p) = get("publish") {
        let _ = writeln!(o, "  latency (µs)        p50        p99        max");
        for k in crate::metrics::SERIES {
            if let Some(l) = p.latency.get(k) {
                let _ = writeln!(o, "    {k:<10} {:>10.0} {:>10.0} {:>10.0}", l.p50_us, l.p99_us, l.max_us);
            }
        }
    }
    o
}

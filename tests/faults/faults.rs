//! Fault injection on the host pipeline: `kill -9` of one stage at a time while testsrc
//! flows at 30 fps. After each kill, `zcpipe run` restarts that stage alone: the survivors
//! keep their pids and, once the restarted stage has re-joined, their open fd counts; the
//! stream goes on; a detections client stays connected (but when publish itself was killed,
//! and then it reconnects as `zcpipe watch` does) and is told which stage restarted and how
//! many frames were lost. At the end every pool's buffers are home and nothing is left.
//!
//! `cargo test` kills each stage twice; `make test-faults` 20 times each
//! (`ZCPIPE_FAULT_KILLS`); `benches/faults.sh` 100 times and prints the restart times.
//! `ZCPIPE_FAULT_INFER=onnx` runs the ONNX detector instead of `--infer none`.

use crate::common;

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{assert_no_orphans, stage_pid, wait_for, zcpipe_run, Reap};
use serde_json::Value;

/// Open fds of `pid` (`/proc/PID/fd`).
fn fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// What the detections client saw: each line with when it came.
#[derive(Default)]
struct Seen {
    lines: Vec<(Instant, Value)>,
    /// Times the socket closed (EOF or error) before the test ended.
    disconnects: u32,
}

/// A detections client that reconnects (as `zcpipe watch` does) when the socket closes.
fn client(
    path: std::path::PathBuf,
    seen: Arc<Mutex<Seen>>,
    done: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let s2 = seen.clone();
    common::reconnecting_client(
        path,
        done,
        move |t, v| seen.lock().unwrap().lines.push((t, v)),
        move || s2.lock().unwrap().disconnects += 1,
    )
}

/// Whether a frame line came after `t`.
fn frame_after(seen: &Mutex<Seen>, t: Instant) -> bool {
    seen.lock().unwrap().lines.iter().any(|(at, v)| *at > t && v["type"] == "frame")
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[test]
fn kill_9_of_any_stage_restarts_it_alone_and_the_stream_goes_on() {
    let kills: usize = std::env::var("ZCPIPE_FAULT_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let infer = std::env::var("ZCPIPE_FAULT_INFER").unwrap_or_else(|_| "none".into());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = [
        "--source",
        "testsrc:320x240@30",
        "--infer",
        &infer,
        "--no-print",
        "--stats-interval",
        "1",
        "--restart-max",
        "1000",
        "--restart-window",
        "1",
        "--restart-reset",
        "1",
    ];
    let Running { run, seen, stderr_reader } = start(d, &args, &[]);
    let start = Instant::now();
    assert!(wait_for(Duration::from_secs(120), || frame_after(&seen, start)), "no frame within 120 s");

    let stages = ["capture", "scale", "infer", "publish"];
    // Per killed stage: restart-to-first-frame times (ms), frames lost per notice.
    let mut times: Vec<(usize, f64)> = vec![];
    let mut lost: Vec<u64> = vec![];
    let mut leaked_fds = 0i64;
    // When each stage's current process was first seen: it is killed only once it has run
    // past --restart-reset (1 s), so each restart's back-off is the first one (100 ms).
    let mut born: Vec<Instant> = vec![Instant::now(); stages.len()];
    for round in 0..kills * stages.len() {
        let si = round % stages.len();
        let victim = stages[si];
        let settle = Instant::now();
        assert!(
            wait_for(Duration::from_secs(30), || frame_after(&seen, settle)),
            "round {round}: frames stopped before the kill"
        );
        // Settled: every stage up, frames flowing, and the survivors' fds steady.
        std::thread::sleep(Duration::from_millis(1200).saturating_sub(born[si].elapsed()));
        let pids: Vec<i32> =
            stages.iter().map(|s| stage_pid(d, s).unwrap_or_else(|| panic!("round {round}: no {s} stage"))).collect();
        let before: Vec<usize> = pids.iter().map(|p| fds(*p)).collect();
        let disconnects = seen.lock().unwrap().disconnects;
        let t0 = Instant::now();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pids[si]), nix::sys::signal::Signal::SIGKILL).unwrap();
        // A new process for the victim, and a frame through the whole pipeline after it.
        assert!(
            wait_for(Duration::from_secs(30), || stage_pid(d, victim).is_some_and(|p| p != pids[si])),
            "round {round}: the {victim} stage was not restarted"
        );
        // The first frame through after the restart: the one after the notice (frames
        // queued downstream of the victim before it died may come first), or for publish
        // the first on the client's new connection.
        let first = |s: &Seen| -> Option<Instant> {
            if victim == "publish" {
                return s
                    .lines
                    .iter()
                    .find(|(at, v)| *at > t0 && v["type"] == "frame")
                    .map(|(at, _)| *at)
                    .filter(|_| s.disconnects > disconnects);
            }
            let notice = s.lines.iter().position(|(at, v)| *at > t0 && v["type"] == "notice")?;
            s.lines[notice..].iter().find(|(_, v)| v["type"] == "frame").map(|(at, _)| *at)
        };
        assert!(
            wait_for(Duration::from_secs(30), || first(&seen.lock().unwrap()).is_some()),
            "round {round}: no frame after the {victim} stage was restarted"
        );
        let at = first(&seen.lock().unwrap()).unwrap();
        times.push((si, at.duration_since(t0).as_secs_f64() * 1000.0));
        born[si] = Instant::now();
        // The survivors kept their pids, and their fds come back to what they were.
        leaked_fds += survivors_settle(d, &stages, si, round, &pids, &before);
        // The client stayed connected (unless publish itself died), and was told.
        let s = seen.lock().unwrap();
        if victim != "publish" {
            assert_eq!(
                s.disconnects, disconnects,
                "round {round}: the client was disconnected when the {victim} stage died"
            );
            let notice = s.lines.iter().find(|(at, v)| *at > t0 && v["type"] == "notice");
            let (_, n) =
                notice.unwrap_or_else(|| panic!("round {round}: no notice after the {victim} stage restarted"));
            assert_eq!(n["stage"], victim, "round {round}: {n}");
            assert_eq!(n["event"], "restarted", "round {round}: {n}");
            lost.push(n["frames_lost"].as_u64().unwrap());
        }
    }
    let t_end = Instant::now();
    let (_, s) = stop(run, stderr_reader, d);
    // The client got the end line (and so ended) before the run exited.
    assert!(
        wait_for(Duration::from_secs(5), || seen
            .lock()
            .unwrap()
            .lines
            .iter()
            .any(|(at, v)| *at > t_end && v["type"] == "end")),
        "the client got the end line"
    );
    for st in stages {
        assert_eq!(s["restarts"][st].as_u64(), Some(kills as u64), "{st}: {}", s["restarts"]);
        assert_eq!(s["exit_codes"][st].as_i64(), Some(0), "{st}: {}", s["exit_codes"]);
    }
    // Every pool's buffers are home at the end, and no bad return was ever made.
    for st in ["capture", "scale"] {
        let r = &s["stages"][st];
        assert_eq!(r["extra"]["buffers_still_out"].as_u64(), Some(0), "{st}: {r}");
        assert_eq!(r["pool"]["bad_returns"].as_u64(), Some(0), "{st}: {r}");
    }

    print_numbers(&stages, &times, &lost, leaked_fds);
}

/// After round `round` killed stage `si` of `stages`: every other stage kept its pid (`pids`)
/// and its fds come back to `before`. Returns the fds the survivors leaked.
fn survivors_settle(d: &Path, stages: &[&str], si: usize, round: usize, pids: &[i32], before: &[usize]) -> i64 {
    let victim = stages[si];
    let mut leaked_fds = 0i64;
    for (i, s) in stages.iter().enumerate().filter(|(i, _)| *i != si) {
        assert_eq!(
            stage_pid(d, s),
            Some(pids[i]),
            "round {round}: the {s} stage survived the {victim} stage's death with its pid"
        );
        let settled = wait_for(Duration::from_secs(10), || fds(pids[i]) == before[i]);
        if !settled {
            leaked_fds += fds(pids[i]) as i64 - before[i] as i64;
        }
        assert!(
            settled,
            "round {round}: the {s} stage has {} fds after the {victim} stage's restart, {} before",
            fds(pids[i]),
            before[i]
        );
    }
    leaked_fds
}

/// The numbers of the kill test (benches/faults.sh collects these lines).
fn print_numbers(stages: &[&str], times: &[(usize, f64)], lost: &[u64], leaked_fds: i64) {
    for (si, st) in stages.iter().enumerate() {
        let mut t: Vec<f64> = times.iter().filter(|(i, _)| *i == si).map(|(_, t)| *t).collect();
        t.sort_by(|a, b| a.total_cmp(b));
        println!(
            "faults: {st:<8} kills {:>3}  restart-to-first-frame ms p50 {:>6.0} p99 {:>6.0} max {:>6.0}",
            t.len(),
            percentile(&t, 0.5),
            percentile(&t, 0.99),
            t.last().copied().unwrap_or(0.0)
        );
    }
    let mean = lost.iter().sum::<u64>() as f64 / lost.len().max(1) as f64;
    println!("faults: frames lost per restart (notices): mean {mean:.1}, max {}; fds leaked {leaked_fds}; buffers still out 0", lost.iter().max().unwrap_or(&0));
}

/// A run started by [`start`]: the process, what its detections client saw, and its stderr
/// (read to the end by a thread).
struct Running {
    run: Reap,
    seen: Arc<Mutex<Seen>>,
    stderr_reader: std::thread::JoinHandle<String>,
}

/// Starts a run in `d` with `args` (and `env`), with a detections client that reconnects
/// and stops after the end line, and waits until frames flow (or scale runs).
fn start(d: &Path, args: &[&str], env: &[(&str, &str)]) -> Running {
    let mut c = zcpipe_run(d);
    c.args(args).stdout(Stdio::null()).stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut run = Reap(c.spawn().unwrap());
    let mut pipe = run.0.stderr.take().unwrap();
    let stderr_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut pipe, &mut s);
        s
    });
    let seen = Arc::new(Mutex::new(Seen::default()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    client(d.join("detections.sock"), seen.clone(), done);
    let t = Instant::now();
    assert!(
        wait_for(Duration::from_secs(120), || frame_after(&seen, t) || stage_pid(d, "scale").is_some()),
        "nothing started within 120 s"
    );
    Running { run, seen, stderr_reader }
}

/// Stops the run (SIGINT) and returns its stderr and summary.
fn stop(mut run: Reap, stderr_reader: std::thread::JoinHandle<String>, d: &Path) -> (String, Value) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(run.0.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let status = run.0.wait().unwrap();
    let err = stderr_reader.join().unwrap();
    assert!(status.success(), "{status}: {err}");
    let s: Value = serde_json::from_slice(&std::fs::read(d.join("summary.json")).unwrap()).unwrap();
    assert_no_orphans(d);
    (err, s)
}

/// A stage that hangs (SIGSTOP: it stops reporting) is found by the watchdog, killed and
/// restarted; the others keep their pids and the stream goes on.
#[test]
fn a_hung_stage_is_killed_by_the_watchdog_and_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args =
        ["--source", "testsrc:320x240@30", "--infer", "none", "--no-print", "--stats-interval", "0", "--watchdog", "2"];
    let Running { run, seen, stderr_reader } = start(d, &args, &[]);
    assert!(
        wait_for(Duration::from_secs(60), || frame_after(&seen, Instant::now() - Duration::from_secs(1))),
        "frames flow"
    );
    let pids: Vec<i32> = ["capture", "scale", "infer", "publish"].iter().map(|s| stage_pid(d, s).unwrap()).collect();
    let t0 = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pids[2]), nix::sys::signal::Signal::SIGSTOP).unwrap();
    assert!(
        wait_for(Duration::from_secs(30), || stage_pid(d, "infer").is_some_and(|p| p != pids[2])),
        "the hung infer stage was not replaced"
    );
    let notice =
        || seen.lock().unwrap().lines.iter().any(|(at, v)| *at > t0 && v["type"] == "notice" && v["stage"] == "infer");
    assert!(wait_for(Duration::from_secs(30), notice), "no notice for the infer stage");
    for (i, s) in ["capture", "scale", "publish"].iter().zip([0, 1, 3]).map(|(s, i)| (i, s)) {
        assert_eq!(stage_pid(d, s), Some(pids[i]), "{s} kept its pid");
    }
    assert_eq!(seen.lock().unwrap().disconnects, 0);
    let (err, s) = stop(run, stderr_reader, d);
    assert!(err.contains("sent no report for") && err.contains("process state T (stopped)"), "{err}");
    assert_eq!(s["restarts"]["infer"].as_u64(), Some(1), "{}", s["restarts"]);
}

/// A consumer that takes frames and never gives one back (fault injection: the scale stage
/// keeps every frame) cannot starve capture for good: after the lease timeout capture
/// kills it, takes its buffers back, and serves the restarted one.
#[test]
fn a_consumer_that_keeps_every_buffer_loses_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = [
        "--source",
        "testsrc:320x240@30",
        "--infer",
        "none",
        "--no-print",
        "--stats-interval",
        "0",
        "--restart-max",
        "100",
    ];
    let Running { run, stderr_reader, .. } = start(d, &args, &[("ZCPIPE_FAULT", "hold-frames:scale")]);
    let capture = stage_pid(d, "capture").unwrap();
    let scale = stage_pid(d, "scale").unwrap();
    assert!(
        wait_for(Duration::from_secs(60), || stage_pid(d, "scale").is_some_and(|p| p != scale)),
        "the scale stage holding every buffer was not killed"
    );
    assert_eq!(stage_pid(d, "capture"), Some(capture), "capture kept its pid");
    let (err, s) = stop(run, stderr_reader, d);
    assert!(err.contains("its lease expired; killing it"), "{err}");
    let pool = &s["stages"]["capture"]["pool"];
    assert!(pool["leases_expired"].as_u64().unwrap() >= 1, "{pool}");
    assert!(pool["consumers_lost"].as_u64().unwrap() >= 1, "{pool}");
    // (The restarted scale stage holds frames too, so the drain at the end may time out on
    // one; once it is gone, every buffer is home.)
    assert_eq!(pool["outstanding"].as_u64(), Some(0), "{pool}");
    assert!(s["restarts"]["scale"].as_u64().unwrap() >= 1, "{}", s["restarts"]);
}

/// Stages started alone, as systemd's units start them: when one dies and its unit starts
/// it again (here: by hand), its neighbours waited for it instead of exiting, keep their
/// pids, and the stream goes on to a client that stayed connected.
#[test]
fn stages_run_alone_wait_for_a_restarted_neighbour() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run_dir = d.join("run");
    let sock = d.join("detections.sock");
    let stage = |name: &str| -> Reap {
        let mut c = common::zcpipe();
        c.args(["stage", name, "--run-dir"]).arg(&run_dir).stdout(Stdio::null()).stderr(Stdio::null());
        match name {
            "capture" => c.args(["--source", "testsrc:320x240@30"]),
            "infer" => c.args(["--infer", "none"]),
            "publish" => c.arg("--publish").arg(&sock).args(["--print", "none"]),
            _ => &mut c,
        };
        Reap(c.spawn().unwrap())
    };
    let mut procs: Vec<Reap> = ["capture", "scale", "infer", "publish"].iter().map(|s| stage(s)).collect();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = client(sock.clone(), seen.clone(), done.clone());
    assert!(
        wait_for(Duration::from_secs(120), || frame_after(&seen, Instant::now() - Duration::from_secs(1))),
        "frames flow"
    );
    let t0 = Instant::now();
    // The scale stage dies; "systemd" starts it again 200 ms later.
    procs[1].0.kill().unwrap();
    procs[1].0.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    for (i, p) in procs.iter_mut().enumerate().filter(|(i, _)| *i != 1) {
        assert!(p.0.try_wait().unwrap().is_none(), "stage {i} exited when scale died");
    }
    procs[1] = stage("scale");
    let notice =
        || seen.lock().unwrap().lines.iter().any(|(at, v)| *at > t0 && v["type"] == "notice" && v["stage"] == "scale");
    assert!(wait_for(Duration::from_secs(30), notice), "no notice for the restarted scale stage");
    let t1 = Instant::now();
    assert!(wait_for(Duration::from_secs(10), || frame_after(&seen, t1)), "frames flow again");
    assert_eq!(seen.lock().unwrap().disconnects, 0, "the client stayed connected");
    // Stopped as `systemctl stop zcpipe.target` does: SIGTERM to each.
    for p in &procs {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(p.0.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    }
    for p in &mut procs {
        let st = p.0.wait().unwrap();
        assert!(st.success(), "{st}");
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = reader.join();
}

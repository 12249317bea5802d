//! Several engines (RKNN contexts, one or more per NPU core): one worker thread per lane,
//! fed by the scheduler.
//!
//! This thread takes frames from the scale ring into the scheduler as they come (video: all
//! of them, each replacing its camera's waiting frame; `block`: while the scheduler and the
//! lanes together hold fewer than the scale pool's buffers minus one, beyond which frames
//! wait in the ring). A lane whose engine is free asks the scheduler for the next frame (so any
//! core takes any camera's frame, and the choice is made when a core frees up, by the
//! scheduler's rules: `--max-age`, weights, fair share), runs it, drops the loan at once (the
//! buffer goes back to the scaler) and stores the record in the reorder buffer; whichever
//! lane completes the head of the order publishes it and every record behind it that is
//! ready, so records leave in the order the frames were picked (each camera's in frame
//! order). At the end of the stream the lanes run what waits, then stop; on a signal what
//! waits goes back unrun and the lanes finish what they run. The first lane error stops
//! everything; the stage ends with that error.

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context;
use zcpipe_core::detections::DetectionsDesc;
use zcpipe_core::frame::monotonic_ns;
use zcpipe_core::metrics::FrameSpan;
use zcpipe_core::stage::{Turn, IDLE_WAIT};
use zcpipe_core::{fail, Result};

use super::{
    infer_facts, record, release, send, serve_publish, take_frames, Io, Job, LoopEnd, Out, Queue, Work, CLIENT_BASE,
};
use crate::report::BusyMeter;
use crate::service::Scratch;
use crate::service::{ClientJob, Service, Sink};
use crate::DetectorLane;
use zcpipe_core::service::DropReason;

/// How long the dispatcher waits for a frame while frames are held. A frame's loan goes
/// back through the scale ring's consumer, which is locked while the dispatcher waits in
/// it (`PoolConsumer::recv`), so a lane that finished waits at most this long to return
/// its buffer; with nothing held the dispatcher waits [`IDLE_WAIT`].
const BUSY_WAIT: Duration = Duration::from_millis(1);

/// What the dispatcher and the lanes share, under one mutex.
struct Shared {
    out: Out,
    queue: Queue,
    /// Frames the lanes are running.
    running: usize,
    /// Records of picked frames not yet published, from pick number `next_pub` on; `None`
    /// until that frame's lane is done: the reorder buffer (at most one per lane long).
    pending: VecDeque<Option<DetectionsDesc>>,
    /// Pick number of `pending[0]`.
    next_pub: u64,
    /// The next pick number.
    next_pick: u64,
    /// The records published: how many, and when they went out.
    span: FrameSpan,
    /// When the stage's main loop started.
    start: Instant,
    meter: BusyMeter,
    /// No more frames come: lanes run what waits (`drain`) or give it back, then return.
    closing: Option<bool>,
    /// The first error of a lane (or of publishing); it ends the stage.
    error: Option<zcpipe_core::Error>,
}

impl Shared {
    /// Stores the record of pick number `n` and publishes every record now at the head of
    /// the order.
    fn done(&mut self, n: u64, dd: DetectionsDesc, stop: &AtomicBool) -> Result<()> {
        let slot = n.checked_sub(self.next_pub).and_then(|k| self.pending.get_mut(k as usize));
        *slot.with_context(|| {
            format!("result for pick number {n}, which is not pending (next to publish: {})", self.next_pub)
        })? = Some(dd);
        while self.pending.front().is_some_and(Option::is_some) {
            let Some(Some(dd)) = self.pending.pop_front() else { break };
            self.next_pub += 1;
            send(&mut self.out, dd, stop)?;
            self.span.tick(self.start);
        }
        Ok(())
    }

    fn fail(&mut self, e: zcpipe_core::Error) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs the lanes on worker threads and this thread's dispatcher (see the module doc).
pub(super) fn run_lanes(io: &Io<'_>, lanes: Vec<Box<dyn DetectorLane + '_>>, out: Out) -> LoopEnd {
    let n = lanes.len();
    let pool = io.input.borrow().current().map_or(1, |c| c.buffers().len());
    let cap = pool.saturating_sub(1).max(1);
    let names: Vec<String> = lanes.iter().map(|l| l.describe()).collect();
    let cores: Vec<Option<u32>> = lanes.iter().map(|l| l.core()).collect();
    log::info!(
        "{n} lanes on worker threads ({}); a free lane runs the frame the scheduler picks ({pool} scaler buffers{})",
        names.join(", "),
        if cap < n + 1 {
            format!(": --scale-buffers {} lets every lane run with one frame waiting", n + 2)
        } else {
            String::new()
        }
    );
    let shared = Mutex::new(Shared {
        out,
        queue: Queue::new(io),
        running: 0,
        pending: VecDeque::new(),
        next_pub: 0,
        next_pick: 0,
        span: FrameSpan::default(),
        start: io.start,
        meter: BusyMeter::new(&cores),
        closing: None,
        error: None,
    });
    let cv = Condvar::new();
    let (mut n_in, mut eos) = (0u64, false);
    let sink = LaneSink { shared: &shared, cv: &cv };
    let dispatched = std::thread::scope(|scope| -> Result<&'static str> {
        for (i, mut lane) in lanes.into_iter().enumerate() {
            let (shared, cv, bound, stop, service, spec) = (&shared, &cv, io.bound, io.stop, io.service, io.spec);
            std::thread::Builder::new()
                .name(format!("infer-lane-{i}"))
                .spawn_scoped(scope, move || {
                    let ctx = LaneCtx { i, shared, cv, bound, stop, service, spec };
                    lane_loop(&mut *lane, &ctx)
                })
                .with_context(|| format!("cannot start the worker thread of {}", names[i]))?;
        }
        if let Some(service) = io.service {
            // Without its thread the pipeline goes on, unserved (the lanes already run).
            if let Err(e) = service.serve(scope, &sink, CLIENT_BASE, io.stop) {
                log::warn!("{e:#}: the inference service is off for this run");
            }
        }
        let r = dispatch(io, &shared, &cv, cap, (&mut n_in, &mut eos));
        // End of stream: the lanes run what waits; anything else: it goes back unrun.
        let unrun = {
            let mut s = lock(&shared);
            s.closing = Some(eos);
            if eos {
                Vec::new()
            } else {
                s.queue.sched.drain()
            }
        };
        release(unrun, DropReason::Stopping);
        if let Some(service) = io.service {
            service.stop();
        }
        cv.notify_all();
        r
        // The scope joins the lanes and the service's threads.
    });
    let s = shared.into_inner().unwrap_or_else(|p| p.into_inner());
    let facts = infer_facts(&s.queue.sched, &s.meter, io);
    // A lane's error is the cause: the dispatcher only stopped because of it.
    let ended = match s.error {
        Some(e) => Err(e),
        None => dispatched,
    };
    LoopEnd { ended, out: s.out, n_in, span: s.span, facts }
}

/// The dispatcher of [`run_lanes`]: takes frames into the scheduler (as many as
/// [`super::room`] allows with `cap`, the most the stage may hold); returns why it stopped;
/// counts the frames that came in and notes whether the stream ended (`seen`).
fn dispatch(
    io: &Io<'_>,
    shared: &Mutex<Shared>,
    cv: &Condvar,
    cap: usize,
    seen: (&mut u64, &mut bool),
) -> Result<&'static str> {
    let (n_in, eos) = seen;
    io.ctx.run_loop(
        n_in,
        |n_in| {
            let s = lock(shared);
            let facts = infer_facts(&s.queue.sched, &s.meter, io);
            (io.report)(s.out.counters(), *n_in, s.span, false, facts)
        },
        |n_in| {
            serve_publish(io, &mut lock(shared).out);
            if let Some(asked) = io.control.due() {
                io.control.answer(asked, &mut lock(shared).queue.sched);
            }
            let (held, room) = {
                let s = lock(shared);
                if s.error.is_some() {
                    return Ok(Turn::End("a lane failed"));
                }
                let held = s.queue.sched.held() + s.running;
                let room = super::room(io, held, cap);
                if room == 0 {
                    // `block`: frames wait in the ring until a lane gives one back.
                    drop(cv.wait_timeout(s, IDLE_WAIT));
                    return Ok(Turn::Next);
                }
                (held, room)
            };
            let wait = if held > 0 { BUSY_WAIT } else { IDLE_WAIT };
            // The lanes imported the old pool and borrow the detector while they run: a
            // restarted scale stage's pool needs a restarted infer stage to bind it.
            let mut rebind = |_: &zcpipe_core::pool::PoolConsumer| -> Result<()> {
                fail!("the scale stage restarted with a new pool, which the NPU lanes cannot import while they run; the infer stage restarts to bind it")
            };
            let (jobs, ended) = take_frames(io, room, wait, &mut rebind)?;
            if !jobs.is_empty() {
                *n_in += jobs.len() as u64;
                let replaced = lock(shared).queue.admit(jobs, monotonic_ns());
                release(replaced, DropReason::Newer); // their buffers go back, outside the lock
                cv.notify_all();
            }
            if ended {
                *eos = true;
                return Ok(Turn::End("end of stream"));
            }
            Ok(Turn::Next)
        },
    )
}

/// The service's way into the scheduler the lanes share.
struct LaneSink<'a> {
    shared: &'a Mutex<Shared>,
    cv: &'a Condvar,
}

impl Sink for LaneSink<'_> {
    fn open(&self, slot: usize, name: String, weight: f64) {
        lock(self.shared).queue.sched.open_client(slot, name, weight);
    }

    fn submit(&self, job: ClientJob) -> Vec<(ClientJob, DropReason)> {
        let mut s = lock(self.shared);
        if s.closing.is_some() || s.error.is_some() {
            return vec![(job, DropReason::Stopping)];
        }
        let replaced = s.queue.admit_client(job);
        drop(s);
        self.cv.notify_all();
        replaced.map(|old| (old, DropReason::Newer)).into_iter().collect()
    }

    fn client_lines(&self) -> std::collections::BTreeMap<String, crate::sched::CameraSched> {
        lock(self.shared).queue.sched.client_facts()
    }

    fn close(&self, slot: usize) -> Vec<ClientJob> {
        let items = lock(self.shared).queue.sched.close_client(slot);
        items
            .into_iter()
            .filter_map(|w| match w {
                Work::Client(j) => Some(j),
                Work::Frame(_) => None,
            })
            .collect()
    }
}

/// What a lane's worker shares with the others and the dispatcher.
struct LaneCtx<'a> {
    /// Its number.
    i: usize,
    shared: &'a Mutex<Shared>,
    cv: &'a Condvar,
    /// The detector imported the scale pool (frames go to `detect_bound`).
    bound: bool,
    stop: &'a AtomicBool,
    service: Option<&'a Service>,
    spec: &'a crate::InputSpec,
}

/// A lane's worker: asks the scheduler for a frame or a client's request whenever its
/// engine is free, runs it, gives the loan back, then files the record (see
/// [`run_lanes`]) or answers the client. Returns when the dispatcher closes and nothing is
/// left for it, or a lane failed.
fn lane_loop(lane: &mut (dyn DetectorLane + '_), c: &LaneCtx<'_>) {
    let core = lane.core();
    let mut scratch = Scratch::default();
    let mut s = lock(c.shared);
    loop {
        if s.error.is_some() {
            return;
        }
        let (picked, expired) = s.queue.pick();
        let Some((work, skipped)) = picked else {
            if s.closing.is_some() {
                return;
            }
            drop(s);
            release(expired, DropReason::Age); // past --max-age: the buffers go back unrun
            s = lock(c.shared);
            if s.queue.sched.held() == 0 && s.closing.is_none() {
                s = c.cv.wait_timeout(s, IDLE_WAIT).unwrap_or_else(|p| p.into_inner()).0;
            }
            continue;
        };
        let job = match work {
            Work::Frame(job) => job,
            Work::Client(job) => {
                s.running += 1;
                drop(s);
                release(expired, DropReason::Age);
                let ran = match c.service {
                    Some(service) => job.run(lane, &mut scratch, c.spec, service),
                    None => Ok(None),
                };
                s = lock(c.shared);
                s.running -= 1;
                match ran {
                    Ok(Some((start, end))) => s.meter.ran(core, c.i, start, end),
                    Ok(None) => {}
                    Err(e) => s.fail(
                        e.context(format!("inference on a service client's request ({})", lane.describe())).into(),
                    ),
                }
                c.cv.notify_all();
                continue;
            }
        };
        let Job { frame, desc } = job;
        let n = s.next_pick;
        s.next_pick += 1;
        s.pending.push_back(None);
        s.running += 1;
        drop(s);
        release(expired, DropReason::Age);
        lane.before_frame(&desc);
        let t0 = Instant::now();
        let result = if c.bound {
            lane.detect_bound(&frame)
        } else {
            frame.read().and_then(|g| lane.detect(g[0].bytes(), &desc.layout))
        };
        let (start, end) = lane.last_run().filter(|r| r.0 >= t0).unwrap_or((t0, Instant::now()));
        drop(frame); // the scale buffer goes back as soon as the engine is done with it
        s = lock(c.shared);
        s.running -= 1;
        s.meter.ran(core, c.i, start, end);
        match result {
            Ok(dets) => {
                let busy = s.meter.busy_us();
                if let Err(e) = s.done(n, record(&desc, &dets, skipped, busy), c.stop) {
                    s.fail(e);
                }
            }
            Err(e) => s.fail(e.context(format!("inference on frame {} ({})", desc.seq, lane.describe())).into()),
        }
        c.cv.notify_all();
    }
}

//! One engine (ONNX on the CPU, `none`, replay, a single RKNN context): the stage's own
//! thread takes the frames waiting in the scale ring into the scheduler, runs the frame it
//! picks, publishes the record, and goes round again.

use std::cell::Cell;
use std::time::Instant;

use anyhow::Context;
use zcpipe_core::frame::monotonic_ns;
use zcpipe_core::metrics::FrameSpan;
use zcpipe_core::stage::{Turn, IDLE_WAIT};
use zcpipe_core::Result;

use super::{bind, infer_facts, record, release, send, serve_publish, take_frames, Io, Job, LoopEnd, Out, Queue, Work};
use crate::report::BusyMeter;
use crate::Detector;
use zcpipe_core::service::DropReason;

/// The loop's state: the detections hop, frames in, frames out, the waiting frames, the
/// engine's busy time, and whether the stream ended.
struct Single {
    out: Out,
    n_in: u64,
    span: FrameSpan,
    queue: Queue,
    meter: BusyMeter,
    eos: bool,
}

/// Runs every frame on this thread (see the module doc); returns how the loop ended.
pub(super) fn run_single(io: &Io<'_>, det: &mut dyn Detector, out: Out) -> LoopEnd {
    let mut st = Single {
        out,
        n_in: 0,
        span: FrameSpan::default(),
        queue: Queue::new(io),
        meter: BusyMeter::new(&[None]),
        eos: false,
    };
    // The frames the scale ring may lend us at once: all but one of its buffers.
    let room = io.input.borrow().current().map_or(1, |c| c.buffers().len()).saturating_sub(1).max(1);
    let ended = io.ctx.run_loop(
        &mut st,
        |st| {
            let facts = infer_facts(&st.queue.sched, &st.meter, io);
            (io.report)(st.out.counters(), st.n_in, st.span, false, facts)
        },
        |st| turn(io, det, st, room),
    );
    release(st.queue.sched.drain(), DropReason::Stopping); // frames still waiting go back unrun
    let facts = infer_facts(&st.queue.sched, &st.meter, io);
    LoopEnd { ended, out: st.out, n_in: st.n_in, span: st.span, facts }
}

/// One turn: serves a publish stage that joins again, takes what the ring holds (waiting
/// only when nothing waits here), then runs the frame the scheduler picks.
fn turn(io: &Io<'_>, det: &mut dyn Detector, st: &mut Single, room: usize) -> Result<Turn> {
    serve_publish(io, &mut st.out);
    io.control.serve(&mut st.queue.sched);
    if !st.eos {
        let held = st.queue.sched.held();
        let wait = if held > 0 { std::time::Duration::ZERO } else { IDLE_WAIT };
        let rejoined = Cell::new(false);
        let mut rebind = |c: &zcpipe_core::pool::PoolConsumer| {
            rejoined.set(true);
            bind(det, c).map(drop)
        };
        let (jobs, eos) = take_frames(io, super::room(io, held, room), wait, &mut rebind)?;
        if rejoined.get() {
            // Frames of the scale stage's old pool: the detector now reads the new one.
            release(st.queue.sched.drain(), DropReason::Stopping);
        }
        st.eos = eos;
        st.n_in += jobs.len() as u64;
        release(st.queue.admit(jobs, monotonic_ns()), DropReason::Newer);
    }
    let (picked, expired) = st.queue.pick();
    release(expired, DropReason::Age);
    let (Job { frame, desc: d }, skipped) = match picked {
        Some((Work::Frame(job), skipped)) => (job, skipped),
        // The service runs with the lanes' loop: no client's job comes here.
        Some((Work::Client(job), _)) => {
            job.drop_with(DropReason::Stopping);
            return Ok(Turn::Next);
        }
        None => return Ok(if st.eos { Turn::End("end of stream") } else { Turn::Next }),
    };
    det.before_frame(&d);
    let t0 = Instant::now();
    let dets = if io.bound {
        // The device reads the buffer in place: no CPU mapping, no sync ioctl here.
        det.detect_bound(&frame).with_context(|| format!("inference on frame {}", d.seq))?
    } else {
        let g = frame.read()?;
        det.detect(g[0].bytes(), &d.layout).with_context(|| format!("inference on frame {}", d.seq))?
    };
    let (start, end) = det.last_run().filter(|r| r.0 >= t0).unwrap_or((t0, Instant::now()));
    st.meter.ran(None, 0, start, end);
    drop(frame); // the scale buffer goes back before we publish
    send(&mut st.out, record(&d, &dets, skipped, st.meter.busy_us()), io.stop)?;
    st.span.tick(io.start);
    Ok(Turn::Next)
}

//! The publish stage's process: join the infer stage's detections ring, then turn each
//! frame's detections into one JSON line for every client (and optionally stdout), keeping
//! latency histograms of every stage.

use std::io::Write as _;
use std::time::Instant;

use zcpipe_core::{fail, Result};

use zcpipe_core::channel::{Receiver, Recv};
use zcpipe_core::control::{reply, LiveCamera, StageControl, StageRequest};
use zcpipe_core::detections::DetectionsDesc;
use zcpipe_core::frame::{camera_of, monotonic_ns, RestartMark, Stage, MAX_CAMERAS};
use zcpipe_core::link::Offer;
use zcpipe_core::link::{Conn, ControlMsg, Listener};
use zcpipe_core::metrics::{latencies_us, open_fd_count, Facts, FrameSpan, LatencySet, StageReport};
use zcpipe_core::pool::join;
use zcpipe_core::stage::{incoming, Drained, Extras, Incoming, StageCtx, Turn, IDLE_WAIT};

use super::output::Outputs;
use super::report::{CameraFacts, PublishFacts};
use super::schema::{EventJson, FrameJson, NoticeJson, SocketLine};
use super::tracking::{human_event, Tracking, TRACK_IDS_FILE};
use super::{DetectionServer, PrintMode, PublishConfig};

/// Builds the published object of one frame ([`FrameJson::of_record`]).
pub(crate) fn frame_json(d: &DetectionsDesc, camera: &str, labels: &[String], lat: &[Option<f64>; 5]) -> FrameJson {
    FrameJson::of_record(d, camera, labels, lat)
}

/// One readable line for a frame: `frame 12 (768x432, 72.1 ms): person 0.91 [188,97,276,371]`.
pub fn human_line(f: &FrameJson) -> String {
    let dets: Vec<String> = f
        .detections
        .iter()
        .map(|d| {
            let id = d.track_id.map(|i| format!(" #{i}")).unwrap_or_default();
            format!(
                "{}{id} {:.2} [{:.0},{:.0},{:.0},{:.0}]",
                d.label, d.score, d.bbox[0], d.bbox[1], d.bbox[2], d.bbox[3]
            )
        })
        .collect();
    format!(
        "frame {} ({}x{}, {:.1} ms): {}",
        f.seq,
        f.width,
        f.height,
        f.latency_us.total / 1000.0,
        if dets.is_empty() { "nothing".to_string() } else { dets.join(", ") }
    )
}

/// Runs the publish stage with `cfg` until the infer stage ends the stream, the stop flag
/// is set or infer hangs up; returns the exit code. Every client is told how it ended.
pub fn run(cfg: PublishConfig, ctx: StageCtx<'_>) -> Result<i32> {
    let _listener = Listener::bind(&ctx.data.socket(&ctx.id))?;
    let mut stage = PublishStage::set_up(&cfg, &ctx)?;
    let ended = ctx.run_loop(&mut stage, |s| s.report(false, s.input.facts().into()), PublishStage::turn);
    stage.close(ended)
}

/// The publish stage once set up, and its frame loop's state. Its fields drop in this order
/// (the clients' server, the tracking, the outputs, the latencies, then the infer stage's
/// hop), as when they were locals of one function.
struct PublishStage<'s> {
    /// The clients of the detections socket.
    server: DetectionServer,
    /// Every camera's tracker, and the events counted.
    tracking: Tracking,
    /// The outputs besides the socket (MQTT, the web view, snapshots): every line goes to them too.
    outputs: Outputs,
    /// Per camera (several only): its frames and latencies, for the report's `cameras`.
    per_cam: Vec<(LatencySet, FrameSpan)>,
    /// Each camera's last frame's capture time (the gap a notice reports).
    last_ts: Vec<Option<u64>>,
    /// Latencies of every frame, by stage.
    lat: LatencySet,
    /// The detections hop from the infer stage.
    input: Infer,
    /// The model's labels (a restarted infer stage must have the same).
    labels: Vec<String>,
    /// The stage's settings.
    cfg: &'s PublishConfig,
    /// The stage's context: stop flag, reporter, data-path settings.
    ctx: &'s StageCtx<'s>,
    /// Whether the run has several cameras.
    several: bool,
    /// Where `--print` prints.
    stdout: std::io::Stdout,
    /// Open fds after set-up.
    fds_setup: usize,
    /// When the frame loop started.
    start: Instant,
    /// Frames taken from the infer stage.
    n_in: u64,
    /// Frames out are the span's frames: `span.tick` counts each one handed out.
    span: FrameSpan,
    /// The recorder's index, read for the clips it closes (`--clips`).
    clips: Option<crate::recorded::ClipWatch>,
    /// Where the supervisor hands over changes taken live.
    control: Option<StageControl>,
    /// The cameras' names by camera index (cameras added live included).
    cameras: Vec<String>,
    /// Per camera removed from the run: when (CLOCK_MONOTONIC ns), and its frames in flight
    /// then that were not published since. A frame captured later is of the camera added back.
    removed: Vec<Option<(u64, u64)>>,
}

impl<'s> PublishStage<'s> {
    /// Set-up: binds the detections socket, starts the outputs, joins the infer stage's
    /// detections hop, then tells the supervisor the stage is ready.
    fn set_up(cfg: &'s PublishConfig, ctx: &'s StageCtx<'s>) -> Result<PublishStage<'s>> {
        let path = cfg.socket.clone();
        let server = DetectionServer::bind(&path)?;
        server.share_with(super::socket_group(cfg.socket_group.as_deref())?.as_ref())?;
        // Outputs start with the set-up: one that cannot (an address in use) stops the stage
        // before it is ready, so it is not restarted over and over.
        let outputs = super::open_outputs(cfg, &ctx.data)?;
        // Without it the stage runs as before, only without live changes.
        let control = StageControl::bind(&ctx.data.run_dir, "publish")
            .map_err(|e| log::warn!("no live changes for this publish stage: {e:#}"))
            .ok();
        let up = Conn::connect_retry(
            &ctx.data.socket(&Stage::Infer.into()),
            "infer stage",
            ctx.stop,
            ctx.data.connect_timeout,
        )?;
        let hello = ControlMsg::Hello { stage: "publish".into(), accept: vec![], want: None, wait: ctx.data.wait };
        let (offer, rx) = join_infer(up, &hello, ctx)?;
        let labels = offer.labels;
        let input = Infer { rx: Some(rx), hello, away: None, next_try: Instant::now(), refused: 0, rejected_before: 0 };
        let fds_setup = open_fd_count();
        ctx.ready(Instant::now());
        log::info!("publishing {} on {}; open fds after set-up: {fds_setup}", offer.description, path.display());
        Ok(PublishStage {
            start: Instant::now(),
            lat: LatencySet::default(),
            per_cam: cfg.cameras.iter().map(|_| Default::default()).collect(),
            last_ts: vec![None; MAX_CAMERAS],
            several: cfg.cameras.len() > 1,
            n_in: 0,
            stdout: std::io::stdout(),
            span: FrameSpan::default(),
            tracking: Tracking::new(cfg.track.clone(), &cfg.cameras).keep_ids_in(ctx.data.run_dir.join(TRACK_IDS_FILE)),
            server,
            outputs,
            input,
            labels,
            clips: cfg.clips.clone().map(|d| crate::recorded::ClipWatch::new(d, cfg.http.is_some())),
            control,
            cameras: cfg.cameras.clone(),
            removed: vec![None; MAX_CAMERAS],
            cfg,
            ctx,
            fds_setup,
        })
    }

    /// Sends a `clip` line for each clip the recorder closed since the last look (`last`: the stream's end's).
    fn announce_clips(&mut self, last: bool) -> anyhow::Result<()> {
        let Some(w) = &mut self.clips else { return Ok(()) };
        for c in if last { w.last() } else { w.poll() } {
            let human = format!("{}: {}", c.camera, crate::recorded::human_clip(&c));
            log::info!("{human}");
            let typed = SocketLine::Clip(c);
            self.send(&typed, &typed.to_line()?, &|| human.clone());
        }
        Ok(())
    }

    /// Takes the supervisor's changes waiting: a scene changed live, a change to announce,
    /// a camera removed (its tracks end now).
    fn serve_control(&mut self) -> anyhow::Result<()> {
        let Some(c) = self.control.as_mut() else { return Ok(()) };
        for (ch, request) in c.poll() {
            let (camera, change) = match request {
                StageRequest::Scene { cameras, change } => match self.tracking.set_scenes(&cameras) {
                    Ok(changed) => {
                        self.outputs.shapes(&crate::http::draw::Shapes::per_camera(self.tracking.config()));
                        (if changed.len() == 1 { changed[0].clone() } else { String::new() }, change)
                    }
                    Err(e) => {
                        reply(&ch, Err(e));
                        continue;
                    }
                },
                StageRequest::Announce { camera, change } => (camera, change),
                StageRequest::CameraRemoved { camera } => {
                    if let Some(i) = self.cameras.iter().position(|c| *c == camera) {
                        self.removed[i] = Some((monotonic_ns(), 0));
                    }
                    let ended = self.tracking.end_camera(&camera, monotonic_ns(), &self.labels);
                    reply(&ch, Ok(()));
                    // Its tracks' `end` events first: then the outputs forget the camera
                    // (MQTT: its counts to 0, unavailable) until it is added back.
                    self.send_events(ended)?;
                    self.outputs.camera_removed(&camera);
                    continue;
                }
                StageRequest::Cameras { cameras } => {
                    reply(&ch, self.add_cameras(&cameras));
                    continue;
                }
            };
            // The supervisor logs the change once; here it goes to the clients.
            reply(&ch, Ok(()));
            let n = NoticeJson {
                stage: "run".into(),
                camera: if self.several { camera } else { String::new() },
                event: "config_changed".into(),
                frames_lost: 0,
                seq: 0,
                gap_s: None,
                change: Some(change),
            };
            let typed = SocketLine::Notice(n.clone());
            self.send(&typed, &typed.to_line()?, &|| super::watch::notice_line(&n));
        }
        Ok(())
    }

    /// The cameras past the stage's own in `cameras` join: each is tracked, published and
    /// shown from its first frame (its zones come with the next scene).
    fn add_cameras(&mut self, cameras: &[LiveCamera]) -> std::result::Result<(), String> {
        if !self.several {
            return Err("this publish stage serves one unnamed camera; it is restarted for more".into());
        }
        for i in LiveCamera::added(&self.cameras, cameras)? {
            let name = &cameras[i].name;
            self.tracking.add_camera(name);
            self.outputs.camera_added(name);
            self.per_cam.push(Default::default());
            self.cameras.push(name.clone());
            log::info!("camera {name} joined the publish stage");
        }
        Ok(())
    }

    /// Whether `d` is a frame of a camera removed from the run, captured before its
    /// removal (in flight then): it is not published (its tracks ended, its outputs said it
    /// is gone). Counted, and said once the camera is back.
    fn of_removed_camera(&mut self, d: &DetectionsDesc) -> bool {
        let cam = camera_of(d.flags);
        let Some(Some((at, n))) = self.removed.get_mut(cam) else { return false };
        if d.timestamp_ns <= *at {
            *n += 1;
            return true;
        }
        if *n > 0 {
            log::info!("camera {}: {n} frames in flight at its removal were not published", self.cameras[cam]);
        }
        self.removed[cam] = None;
        false
    }

    /// The name of the camera of `d`.
    fn camera_name(&self, d: &DetectionsDesc) -> String {
        self.cameras.get(camera_of(d.flags)).cloned().unwrap_or_else(|| format!("cam{}", camera_of(d.flags)))
    }

    /// One turn of the frame loop: services the clients and the outputs, then publishes the
    /// next frame's detections (a notice first if a stage before restarted), and records its
    /// latencies.
    fn turn(&mut self) -> Result<Turn> {
        self.server.service_due();
        self.outputs.tick();
        self.announce_clips(false)?;
        self.serve_control()?;
        let validate = |d: &DetectionsDesc| d.validate();
        let mut d = match incoming(self.input.recv(&validate, self.ctx, &self.labels)?, "infer", "", || false)? {
            Incoming::Item(d) => d,
            Incoming::Eos => return Ok(Turn::End("end of stream")),
            Incoming::Idle => {
                // No frame: tracks of cameras that stopped sending still end on time.
                let ended = self.tracking.expire(&self.labels);
                self.send_events(ended)?;
                return Ok(Turn::Next);
            }
        };
        self.n_in += 1;
        if self.of_removed_camera(&d) {
            return Ok(Turn::Next);
        }
        d.stamps[2 * Stage::Publish as usize] = monotonic_ns();
        // The line carries the latencies up to now, when it is built: it cannot carry
        // the time it takes to serialise and send itself (LatencyJson).
        d.stamps[2 * Stage::Publish as usize + 1] = monotonic_ns();
        let camera = self.camera_name(&d);
        if let Some(m) = RestartMark::from_flags(d.flags) {
            self.notice_restart(m, &d, &camera)?;
        }
        self.publish_frame(&d, &camera)?;
        // The histograms get the stage's whole span: taken off the ring to the line
        // handed to every client and printed.
        d.stamps[2 * Stage::Publish as usize + 1] = monotonic_ns();
        let l = latencies_us(d.timestamp_ns, &d.stamps);
        self.lat.record(&l);
        if let Some((cl, cs)) = self.per_cam.get_mut(camera_of(d.flags)).filter(|_| self.several) {
            cl.record(&l);
            cs.tick(self.start);
        }
        self.span.tick(self.start);
        Ok(Turn::Next)
    }

    /// Says that the stage `m` names restarted (or, `m.reconnected`, that the camera's
    /// network stream came back) before frame `d` of `camera`: in the log, and as a notice
    /// line to every client and output.
    fn notice_restart(&mut self, m: RestartMark, d: &DetectionsDesc, camera: &str) -> anyhow::Result<()> {
        let cam = camera_of(d.flags);
        let gap_s = self
            .last_ts
            .get(cam)
            .copied()
            .flatten()
            .map(|t| (d.timestamp_ns.saturating_sub(t) as f64 / 1e9 * 10.0).round() / 10.0);
        if m.reconnected {
            log::info!(
                "camera {camera} reconnected{}; {} frames lost; frame {} follows",
                gap_s.map(|g| format!(" after {g:.1} s")).unwrap_or_default(),
                m.lost,
                d.seq
            );
        } else {
            log::info!(
                "the {} stage restarted; {} frames lost; frame {} of camera {camera} follows",
                m.stage.name(),
                m.lost,
                d.seq
            );
        }
        // A capture stage is one camera's; any other stage serves every camera, so
        // its notice names none (`zcpipe watch --camera` shows it whatever the camera).
        let about = if m.stage == Stage::Capture && self.several { camera.to_string() } else { String::new() };
        let n = NoticeJson {
            stage: m.stage.name().into(),
            camera: about,
            event: m.event().into(),
            frames_lost: m.lost.into(),
            seq: d.seq,
            gap_s,
            change: None,
        };
        let typed = SocketLine::Notice(n.clone());
        let line = typed.to_line()?;
        self.send(&typed, &line, &|| super::watch::notice_line(&n));
        // Frames lost by a stage after capture were never looked at: the gap does
        // not count against the camera's tracks (a camera that was away does).
        if m.stage != Stage::Capture {
            self.tracking.pause(cam, d.timestamp_ns);
        }
        // Either way the gap is explained: the tracker's advice about slow frames is not for it.
        self.tracking.gap(cam);
        Ok(())
    }

    /// Publishes frame `d` of `camera`: tracks its detections, sends its line, then the
    /// events of its tracks.
    fn publish_frame(&mut self, d: &DetectionsDesc, camera: &str) -> anyhow::Result<()> {
        if let Some(t) = self.last_ts.get_mut(camera_of(d.flags)) {
            *t = Some(d.timestamp_ns);
        }
        let mut f = frame_json(d, camera, &self.labels, &latencies_us(d.timestamp_ns, &d.stamps));
        let events = self.tracking.frame(camera_of(d.flags), d.timestamp_ns, &mut f, &self.labels);
        let frame = SocketLine::Frame(f);
        let line = frame.to_line()?;
        let several = self.several;
        self.send(&frame, &line, &|| match &frame {
            SocketLine::Frame(f) if several => format!("{camera}: {}", human_line(f)),
            SocketLine::Frame(f) => human_line(f),
            _ => String::new(),
        });
        self.send_events(events)
    }

    /// Hands a line to every client and every output, and prints it as --print says: the
    /// JSON line, or `human`.
    fn send(&mut self, typed: &SocketLine, line: &str, human: &dyn Fn() -> String) {
        self.server.broadcast(line.as_bytes());
        self.outputs.line(typed);
        match self.cfg.print {
            PrintMode::Json => {
                let _ = self.stdout.lock().write_all(line.as_bytes());
            }
            PrintMode::Human => {
                let _ = writeln!(self.stdout.lock(), "{}", human());
            }
            PrintMode::None => {}
        }
    }

    /// Sends each of `events` as a line ([`PublishStage::send`]).
    fn send_events(&mut self, events: Vec<EventJson>) -> anyhow::Result<()> {
        let several = self.several;
        for e in events {
            let typed = SocketLine::Event(e);
            let line = typed.to_line()?;
            let SocketLine::Event(e) = &typed else { unreachable!("built as an event just above") };
            self.send(&typed, &line, &|| {
                if several {
                    format!("{}: {}", e.camera, human_event(e))
                } else {
                    human_event(e)
                }
            });
        }
        Ok(())
    }

    /// Sends a report (`final_report`: the last) with `extra`, the tracking's, the outputs'
    /// and the server's facts, and each camera's with several.
    fn report(&self, final_report: bool, mut extra: Facts) {
        let mut facts = PublishFacts::default();
        // Masks and filters count without a tracker too.
        if self.tracking.on() || self.tracking.dropped_any() {
            facts.tracking = Some(self.tracking.report());
        }
        self.outputs.report(&mut facts);
        facts.server = Some(self.server.stats());
        if self.several {
            let cams = self
                .cameras
                .iter()
                .zip(&self.per_cam)
                .map(|(name, (l, s))| {
                    (name.clone(), CameraFacts { frames: s.frames, out_span: *s, latency: l.summary() })
                })
                .collect();
            facts.cameras = Some(cams);
        }
        extra.put(&facts);
        self.ctx.reporter.send(&StageReport {
            frames_in: self.n_in,
            frames_out: self.span.frames,
            latency: self.lat.summary(),
            out_span: Some(self.span),
            ..self.ctx.report(self.start, final_report, extra)
        })
    }

    /// Ends the stage after its frame loop (which `ended` so): ends every track, tells every
    /// client and output how the stream ended, and sends the final report.
    fn close(mut self, ended: Result<&'static str>) -> Result<i32> {
        let (ctx, n_in, fds_setup) = (self.ctx, self.n_in, self.fds_setup);
        ctx.close(
            &mut self,
            ended,
            format!("{n_in} frames"),
            fds_setup,
            |s, end| {
                // Every track ends with the stream, before the end line.
                let ended = s.tracking.finish(monotonic_ns(), &s.labels);
                if let Err(e) = s.send_events(ended).and_then(|_| s.announce_clips(true)) {
                    log::warn!("the last events: {e:#}");
                }
                s.server.close_all(&end.reason, s.span.frames);
                s.outputs.close(&super::schema::EndJson {
                    end: true,
                    frames: s.span.frames,
                    reason: end.reason.clone(),
                });
                s.tracking.forget_ids();
                Drained::nothing()
            },
            |s, mut extras| {
                extras.extend(s.input.facts());
                s.report(true, extras)
            },
        )
    }
}

/// Joins the infer stage's detections hop on `up` with `hello`: its offer and receiver.
fn join_infer(up: Conn, hello: &ControlMsg, ctx: &StageCtx<'_>) -> Result<(Offer, Receiver<DetectionsDesc>)> {
    let (offer, mut rx, bufs) = join::<DetectionsDesc>(up, hello, ctx.data.wait, "infer")?;
    rx.set_spin(ctx.data.spin);
    if !bufs.is_empty() {
        fail!("infer offered {} buffers; the detections hop carries none", bufs.len());
    }
    Ok((offer, rx))
}

/// The detections hop from the infer stage, joined again when infer restarts.
struct Infer {
    rx: Option<Receiver<DetectionsDesc>>,
    hello: ControlMsg,
    /// When infer hung up, while it is away.
    away: Option<Instant>,
    next_try: Instant,
    /// Re-joins refused: what answered on infer's socket was no hop publish can use (as
    /// [`zcpipe_core::pool::Upstream::refused`]).
    refused: u64,
    /// Records rejected on the rings before the current one.
    rejected_before: u64,
}

impl Infer {
    /// Its facts for the stage's report: `upstream_refused` (re-joins refused) and
    /// `input_rejected` (records rejected, over every hop joined, in its own count).
    fn facts(&self) -> Extras {
        let now = self.rx.as_ref().map_or(0, |rx| rx.own_counts().rejected);
        vec![("upstream_refused", self.refused.into()), ("input_rejected", (self.rejected_before + now).into())]
    }

    /// Counts and logs (the first 20, then at powers of two) a re-join refused for `why`.
    fn refuse(&mut self, path: &std::path::Path, why: &str) {
        self.refused += 1;
        if self.refused <= 20 || self.refused.is_power_of_two() {
            log::warn!(
                "refused what answered as the infer stage on {} ({} so far): {why}",
                path.display(),
                self.refused
            );
        }
    }

    /// The next record ([`Receiver::recv`]). Infer's hang-up is not an end: the old ring is
    /// let go and, every 50 ms, this tries to join the restarted infer stage (whose labels
    /// must be `labels`), returning [`Recv::Idle`] meanwhile.
    fn recv(
        &mut self,
        validate: &dyn Fn(&DetectionsDesc) -> std::result::Result<(), String>,
        ctx: &StageCtx<'_>,
        labels: &[String],
    ) -> Result<Recv<DetectionsDesc>> {
        if let Some(rx) = &mut self.rx {
            return match rx.recv(validate, &mut |_, _| {}, IDLE_WAIT) {
                Ok(Recv::Hangup) => {
                    log::warn!("the infer stage (pid {}) hung up; waiting for it to come back", rx.conn().peer_pid);
                    self.rejected_before += rx.own_counts().rejected;
                    self.rx = None;
                    self.away = Some(Instant::now());
                    Ok(Recv::Idle)
                }
                Err(e @ zcpipe_core::Error::PeerGone { .. }) => {
                    log::warn!(
                        "the infer stage (pid {}) hung up ({e:#}); waiting for it to come back",
                        rx.conn().peer_pid
                    );
                    self.rejected_before += rx.own_counts().rejected;
                    self.rx = None;
                    self.away = Some(Instant::now());
                    Ok(Recv::Idle)
                }
                r => r,
            };
        }
        if Instant::now() < self.next_try {
            std::thread::sleep(self.next_try - Instant::now());
        }
        self.next_try = Instant::now() + std::time::Duration::from_millis(50);
        let path = ctx.data.socket(&Stage::Infer.into());
        let c = match Conn::try_connect(&path) {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(Recv::Idle),
            Err(e) => {
                self.refuse(&path, &format!("{e:#}"));
                return Ok(Recv::Idle);
            }
        };
        let peer = c.peer();
        let join = || -> Result<(Offer, Receiver<DetectionsDesc>)> {
            c.set_recv_timeout(Some(zcpipe_core::pool::OFFER_TIMEOUT))?;
            let (offer, rx) = join_infer(c, &self.hello, ctx)?;
            rx.conn().set_recv_timeout(None)?;
            Ok((offer, rx))
        };
        let joined = join();
        match joined {
            Ok((offer, _)) if offer.labels != labels => {
                fail!("the restarted infer stage ({peer}) has {} labels, this publish stage was started with {}: publish restarts too", offer.labels.len(), labels.len());
            }
            Ok((_, rx)) => {
                let down = self.away.take().map(|t| t.elapsed().as_secs_f64()).unwrap_or(0.0);
                log::info!("joined the infer stage again ({peer}) after {down:.1} s");
                self.rx = Some(rx);
            }
            Err(e @ zcpipe_core::Error::PeerGone { .. }) => {
                log::debug!("the infer stage is not back yet ({peer}): {e:#}")
            }
            Err(e) => self.refuse(&path, &format!("{peer}: {e:#}")),
        }
        Ok(Recv::Idle)
    }
}

//! The display stage process: open the card, join the capture pool's tap (holding 2),
//! read the detections, and show each newest frame (module docs of [`super`]).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use anyhow::Result;
use drm::buffer::DrmFourcc;
use drm::control::framebuffer;

use super::detections::Detections;
use super::kms::{drm_format, Dumb, Output, Scanout};
use super::shapes::OnScreen;
use super::{box_on_screen, letterbox, DisplayConfig, Rect};
use zcpipe_core::draw::{Canvas, Drawn};
use zcpipe_core::frame::FrameLayout;
use zcpipe_core::metrics::{open_fd_count, Facts, FrameSpan, StageReport};

use super::report::{DisplayFacts, DisplayReport};
use zcpipe_core::pool::Frame;
use zcpipe_core::stage::{Drained, StageCtx, Turn, IDLE_WAIT};
use zcpipe_core::tap::{frame_to_rgb, TapClient};

/// The frames the display's tap holds at most: the one on screen and the one queued to
/// replace it (until its page flip completes).
pub const DISPLAY_HOLD: usize = 2;

/// How the frames of one layout reach the screen.
#[derive(Clone, Debug, PartialEq)]
enum Way {
    /// The camera's buffer on a plane, at `pic`.
    ZeroCopy { pic: Rect },
    /// The CPU composes each frame into a dumb buffer of the mode, picture at `pic`; `why`.
    Compose { pic: Rect, why: String },
}

/// A state committed whose page flip has not completed yet.
struct Pending {
    /// The frame on its primary plane (zero-copy), held until the flip after it.
    frame: Option<Frame>,
    seq: u64,
    fence: Option<OwnedFd>,
    /// What the writeback's sidecar says about the picture.
    meta: Option<serde_json::Value>,
    since: Instant,
}

/// Counters of the display, for its reports.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct DisplayCounters {
    /// Frames received from the tap.
    pub received: u64,
    /// Frames shown (their page flip completed).
    pub shown: u64,
    /// Frames captured that the display did not show: gaps in the capture sequence it saw
    /// (its tap held 2 while a flip was pending, or it was behind), plus frames it could not
    /// commit.
    pub skipped: u64,
    /// Framebuffers made from camera buffers (PRIME imports: once per buffer and join).
    pub imports: u64,
    /// Frames composed by the CPU.
    pub composed: u64,
    /// Bytes the CPU wrote composing them (each a whole dumb buffer: pitch x mode height).
    pub composed_bytes: u64,
    /// Overlay redraws (detections changed).
    pub(crate) overlay_draws: u64,
    /// Writeback pictures written (`--display-writeback`).
    pub writebacks: u64,
    /// Commits refused, flips that never came, frames that could not be read.
    pub errors: u64,
}

struct State {
    cfg: DisplayConfig,
    out: Output,
    tap: TapClient,
    dets: Option<Detections>,
    /// Framebuffers of the pool joined now, per buffer index, with the layout they were made for.
    imports: HashMap<u32, (framebuffer::Handle, FrameLayout)>,
    /// The tap's join count the imports belong to.
    import_joins: u64,
    /// Framebuffers of a pool left behind, removed after the next flip.
    stale: Vec<framebuffer::Handle>,
    /// The way chosen for the layout (and copy mode) of the frames now.
    way: Option<(FrameLayout, bool, Way)>,
    compose: Vec<Dumb>,
    compose_next: usize,
    overlay: Vec<Dumb>,
    overlay_front: Option<usize>,
    overlay_next: Option<usize>,
    overlay_gen: u64,
    on_screen: Option<Frame>,
    pending: Option<Pending>,
    counters: DisplayCounters,
    last_seq: Option<u64>,
    first_capture: Option<(u64, u64)>,
    last_capture: Option<(u64, u64)>,
    span: FrameSpan,
    start: Instant,
    writeback_left: u32,
    rgb: Vec<u8>,
}

/// Runs the display stage: see the module documentation. Errors (one line each): no card,
/// a card that cannot be opened, nothing connected.
pub fn run(cfg: DisplayConfig, ctx: StageCtx) -> zcpipe_core::Result<i32> {
    let start = Instant::now();
    let card = super::resolve_card(&cfg.target)?;
    let out = Output::open(&card, cfg.writeback.is_some(), cfg.legacy)?;
    log::info!("{}", out.describe());
    if let Some(dir) = &cfg.writeback {
        std::fs::create_dir_all(dir).map_err(|e| {
            anyhow::anyhow!(
                "--display-writeback {}: {}; pass a folder you can write",
                dir.display(),
                zcpipe_sys::errno_words(&e)
            )
        })?;
        if !out.has_writeback() {
            log::warn!("display: --display-writeback: {} has no writeback connector (or no atomic modesetting); nothing is written", card.display());
        }
    }
    if !cfg.zones.is_empty() || !cfg.lines.is_empty() || !cfg.masks.is_empty() {
        let zones: Vec<&str> = cfg.zones.iter().map(|z| z.name.as_str()).collect();
        let lines: Vec<&str> = cfg.lines.iter().map(|l| l.name.as_str()).collect();
        log::info!(
            "display: drawn with the boxes: zones {}; lines {}; {} masks",
            if zones.is_empty() { "none".into() } else { zones.join(", ") },
            if lines.is_empty() { "none".into() } else { lines.join(", ") },
            cfg.masks.len()
        );
    }
    let socket = ctx.data.socket(&cfg.upstream);
    let tap = TapClient::new(socket, "display", &cfg.upstream.to_string()).holding(DISPLAY_HOLD);
    // Started after set-up is counted (its connection comes and goes; it ends in the drain).
    let dets = None;
    let writeback_left = if cfg.writeback.is_some() { cfg.writeback_frames } else { 0 };
    let mut st = State {
        cfg,
        out,
        tap,
        dets,
        imports: HashMap::new(),
        import_joins: 0,
        stale: vec![],
        way: None,
        compose: vec![],
        compose_next: 0,
        overlay: vec![],
        overlay_front: None,
        overlay_next: None,
        overlay_gen: 0,
        on_screen: None,
        pending: None,
        counters: DisplayCounters::default(),
        last_seq: None,
        first_capture: None,
        last_capture: None,
        span: FrameSpan::default(),
        start,
        writeback_left,
        rgb: vec![],
    };
    let fds_setup = open_fd_count();
    ctx.ready(start);
    st.dets = st.cfg.detections.clone().map(|p| Detections::start(p, st.cfg.camera.clone()));
    let ended = ctx.run_loop(&mut st, |st| ctx.reporter.send(&st.report(&ctx, false, vec![])), |st| st.turn());
    let c = st.counters;
    let what = format!(
        "{} frames shown ({} buffers imported, {} composed, {} skipped, {} writebacks)",
        c.shown, c.imports, c.composed, c.skipped, c.writebacks
    );
    ctx.close(
        &mut st,
        ended,
        what,
        fds_setup,
        |st, _| st.drain(),
        |st, extras| ctx.reporter.send(&st.report(&ctx, true, extras)),
    )
}

impl State {
    fn turn(&mut self) -> zcpipe_core::Result<Turn> {
        if let Some(limit) = self.cfg.frames {
            if self.counters.shown >= limit {
                return Ok(Turn::End("frame limit"));
            }
        }
        if let Some(p) = &self.pending {
            if self.out.wait_flip(Duration::from_millis(50))? {
                self.flip_done();
            } else if p.since.elapsed() > Duration::from_secs(1) {
                // No event for a second: the driver lost it (or the output went off); the
                // state is taken as shown so the display goes on.
                log::warn!("display: no page-flip event for 1 s after frame {}; going on", p.seq);
                self.counters.errors += 1;
                self.flip_done();
            }
            return Ok(Turn::Next);
        }
        let Some(frame) = self.tap.next(IDLE_WAIT)? else {
            // The capture stage ended its stream (not a restart): so does the display.
            return Ok(if self.tap.counters().ends > 0 { Turn::End("end of stream") } else { Turn::Next });
        };
        self.counters.received += 1;
        let d = *frame.desc();
        if let Some(last) = self.last_seq {
            if d.seq > last + 1 {
                self.counters.skipped += d.seq - last - 1;
            }
        }
        self.last_seq = Some(d.seq);
        self.first_capture.get_or_insert((d.seq, d.timestamp_ns));
        self.last_capture = Some((d.seq, d.timestamp_ns));
        let joins = self.tap.counters().joins;
        if joins != self.import_joins {
            // A new pool (the capture stage restarted): its buffers are imported afresh.
            self.stale.extend(self.imports.drain().map(|(_, (fb, _))| fb));
            self.import_joins = joins;
        }
        if let Err(e) = self.show(frame) {
            self.counters.errors += 1;
            self.counters.skipped += 1;
            if self.counters.errors <= 3 {
                log::warn!("display: frame {} not shown: {e:#}", d.seq);
            }
        }
        Ok(Turn::Next)
    }

    /// The way the frames of `layout` take (decided once per layout, said once).
    fn way(&mut self, frame: &Frame) -> Way {
        let layout = frame.desc().layout;
        let copy = self.tap.copy_mode().unwrap_or(false);
        if let Some((l, c, w)) = &self.way {
            if *l == layout && *c == copy {
                return w.clone();
            }
        }
        let mode = self.out.mode_size();
        let size = (layout.width, layout.height);
        let fit = letterbox(size, mode, true).unwrap_or_default();
        let compose = |why: String| Way::Compose { pic: fit, why };
        let driver = self.out.driver.clone();
        let way = if copy {
            compose(
                "--copy-mode: the frames are copies in this process's memory, copied once more as a plain viewer would"
                    .into(),
            )
        } else if self.cfg.force_compose {
            compose("--display-compose".into())
        } else if !self.out.atomic {
            compose(if self.cfg.legacy {
                "--display-legacy: legacy modesetting, one plane".to_string()
            } else {
                format!("{driver} has no atomic modesetting (legacy modesetting, one plane)")
            })
        } else if !drm_format(layout.fourcc).is_some_and(|f| self.out.primary.as_ref().is_some_and(|p| p.takes(f))) {
            compose(format!("{driver} has no plane for {}", layout.fourcc))
        } else if self.dets.is_some() && self.out.overlay.is_none() {
            compose(format!("{driver} has no ARGB8888 overlay plane for the boxes"))
        } else {
            match self.import(frame) {
                Err(e) => compose(format!("the camera's buffers cannot be imported: {e:#}")),
                Ok(fb) => {
                    let over = self.overlay_fb().map(|fb| Scanout {
                        fb,
                        src: Rect { x: 0, y: 0, w: mode.0, h: mode.1 },
                        dst: Rect { x: 0, y: 0, w: mode.0, h: mode.1 },
                    });
                    let src = Rect { x: 0, y: 0, w: size.0, h: size.1 };
                    let at = |pic: Rect| Scanout { fb, src, dst: pic };
                    match (letterbox(size, mode, true), letterbox(size, mode, false)) {
                        (Some(pic), _) if self.out.test(at(pic), over) => Way::ZeroCopy { pic },
                        (_, Some(pic)) if self.out.test(at(pic), over) => Way::ZeroCopy { pic },
                        (_, Some(_)) => compose(format!(
                            "{driver}'s primary plane refuses {} {}x{} on {}x{}",
                            layout.fourcc, size.0, size.1, mode.0, mode.1
                        )),
                        _ => compose(format!(
                            "{driver}'s planes cannot scale {}x{} down to {}x{}",
                            size.0, size.1, mode.0, mode.1
                        )),
                    }
                }
            }
        };
        match &way {
            Way::ZeroCopy { pic } => log::info!(
                "display: zero-copy scanout: {} {}x{} buffers imported once each (PRIME) and shown at {}x{}+{}+{} on {}x{}{}",
                layout.fourcc,
                size.0,
                size.1,
                pic.w,
                pic.h,
                pic.x,
                pic.y,
                mode.0,
                mode.1,
                if (pic.w, pic.h) == size && size != mode { " (at its own size: the plane does not scale it, or need not)" } else { "" }
            ),
            Way::Compose { why, .. } => log::info!("display: CPU composition ({why})"),
        }
        self.way = Some((layout, copy, way.clone()));
        way
    }

    /// The framebuffer of `frame`'s buffer, imported the first time it is seen (and again if
    /// its layout changed).
    fn import(&mut self, frame: &Frame) -> Result<framebuffer::Handle> {
        let layout = frame.desc().layout;
        if let Some((fb, l)) = self.imports.get(&frame.index()) {
            if *l == layout {
                return Ok(*fb);
            }
        }
        let fb = self.out.import(frame.buffers(), &layout)?;
        if let Some((old, _)) = self.imports.insert(frame.index(), (fb, layout)) {
            self.stale.push(old);
        }
        self.counters.imports += 1;
        log::debug!("display: buffer {} imported as framebuffer {fb:?}", frame.index());
        Ok(fb)
    }

    /// The overlay's framebuffer to show now, redrawn first if the detections changed.
    fn overlay_fb(&mut self) -> Option<framebuffer::Handle> {
        self.out.overlay.as_ref()?;
        let dets = self.dets.as_ref()?;
        if self.overlay.is_empty() {
            for _ in 0..2 {
                match self.out.dumb(self.out.mode_size(), DrmFourcc::Argb8888) {
                    Ok(mut d) => {
                        let _ = self.out.with_mapped(&mut d, |b| b.fill(0));
                        self.overlay.push(d);
                    }
                    Err(e) => {
                        log::warn!("{e:#}; no boxes");
                        return None;
                    }
                }
            }
        }
        let generation = dets.generation();
        if generation != self.overlay_gen {
            if let Some(Way::ZeroCopy { pic }) = self.way.as_ref().map(|w| w.2.clone()) {
                let frame = self.way.as_ref().map(|w| (w.0.width, w.0.height)).unwrap_or_default();
                let latest = dets.latest();
                let drawn = drawn(&latest, frame, pic);
                let shapes = OnScreen::of(&self.cfg, Some(&latest), frame, pic);
                let back = self.overlay_front.map_or(0, |f| 1 - f);
                let d = &mut self.overlay[back];
                let (w, h, pitch) = (d.size.0, d.size.1, d.pitch as usize);
                if self
                    .out
                    .with_mapped(d, |bytes| {
                        let mut c = Canvas::argb8888(bytes, pitch, w, h);
                        c.clear();
                        shapes.draw(&mut c);
                        c.detections(&drawn);
                    })
                    .is_ok()
                {
                    self.overlay_gen = latest.generation;
                    self.overlay_next = Some(back);
                    self.counters.overlay_draws += 1;
                }
            }
        }
        self.overlay_next.or(self.overlay_front).map(|i| self.overlay[i].fb)
    }

    fn show(&mut self, frame: Frame) -> Result<()> {
        let way = self.way(&frame);
        let mode = self.out.mode_size();
        let full = Rect { x: 0, y: 0, w: mode.0, h: mode.1 };
        let layout = frame.desc().layout;
        let seq = frame.desc().seq;
        let with_boxes = self.dets.as_ref().map(|d| d.latest());
        // A writeback is due for the first frames shown (with a detections socket: once
        // there are boxes to see).
        let wb = self.writeback_left > 0
            && self.out.has_writeback()
            && with_boxes.as_ref().is_none_or(|l| !l.dets.is_empty());
        match way {
            Way::ZeroCopy { pic } => {
                let fb = self.import(&frame)?;
                let over = self.overlay_fb().map(|fb| Scanout { fb, src: full, dst: full });
                let wb =
                    wb && (self.dets.is_none() || self.overlay_gen == with_boxes.as_ref().map_or(0, |l| l.generation));
                let fence = self.out.show(
                    Scanout { fb, src: Rect { x: 0, y: 0, w: layout.width, h: layout.height }, dst: pic },
                    over,
                    wb,
                )?;
                let meta = wb.then(|| meta(&self.cfg, "zero-copy", &layout, seq, mode, pic, with_boxes.as_ref()));
                self.pending = Some(Pending { frame: Some(frame), seq, fence, meta, since: Instant::now() });
            }
            Way::Compose { pic, .. } => {
                let mut rgb = std::mem::take(&mut self.rgb);
                let size = frame_to_rgb(&frame, &mut rgb);
                // The frame's pixels are copied out: its buffer goes back now.
                drop(frame);
                let size = size?;
                if self.compose.is_empty() {
                    for _ in 0..2 {
                        self.compose.push(self.out.dumb(mode, DrmFourcc::Xrgb8888)?);
                    }
                }
                let drawn = with_boxes.as_ref().map(|l| drawn(l, size, pic)).unwrap_or_default();
                let shapes = OnScreen::of(&self.cfg, with_boxes.as_ref(), size, pic);
                let d = &mut self.compose[self.compose_next];
                let (w, h, pitch) = (d.size.0, d.size.1, d.pitch as usize);
                self.out.with_mapped(d, |bytes| {
                    let mut c = Canvas::argb8888(bytes, pitch, w, h);
                    super::compose::rgb_into(&rgb, size, &mut c, pic);
                    shapes.draw(&mut c);
                    c.detections(&drawn);
                })?;
                self.rgb = rgb;
                self.counters.composed += 1;
                self.counters.composed_bytes += pitch as u64 * h as u64;
                let fb = self.compose[self.compose_next].fb;
                self.compose_next = 1 - self.compose_next;
                let fence = self.out.show(Scanout { fb, src: full, dst: full }, None, wb)?;
                let meta = wb.then(|| meta(&self.cfg, "composition", &layout, seq, mode, pic, with_boxes.as_ref()));
                self.pending = Some(Pending { frame: None, seq, fence, meta, since: Instant::now() });
            }
        }
        Ok(())
    }

    /// The pending state is on screen: the frame shown before it goes back, the overlay
    /// drawn for it is the front one, a writeback is read.
    fn flip_done(&mut self) {
        let Some(p) = self.pending.take() else { return };
        self.on_screen = p.frame;
        if let Some(n) = self.overlay_next.take() {
            self.overlay_front = Some(n);
        }
        for fb in self.stale.drain(..) {
            self.out.remove_fb(fb);
        }
        self.counters.shown += 1;
        self.span.tick(self.start);
        if let (Some(fence), Some(meta)) = (p.fence, p.meta) {
            match self.write_back(fence, meta) {
                Ok(path) => {
                    self.writeback_left = self.writeback_left.saturating_sub(1);
                    self.counters.writebacks += 1;
                    log::info!("display: writeback of frame {} written to {}", p.seq, path.display());
                }
                Err(e) => {
                    self.counters.errors += 1;
                    log::warn!("display: writeback of frame {}: {e:#}", p.seq);
                }
            }
        }
    }

    fn write_back(&mut self, fence: OwnedFd, meta: serde_json::Value) -> Result<std::path::PathBuf> {
        let rgb = self.out.writeback_pixels(fence)?;
        let (w, h) = self.out.mode_size();
        let dir = self.cfg.writeback.clone().unwrap_or_default();
        let n = self.counters.writebacks;
        let path = dir.join(format!("wb-{n:03}.ppm"));
        let mut ppm = format!("P6\n{w} {h}\n255\n").into_bytes();
        ppm.extend_from_slice(&rgb);
        std::fs::write(&path, ppm)
            .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), zcpipe_sys::errno_words(&e)))?;
        let side = dir.join(format!("wb-{n:03}.json"));
        std::fs::write(&side, serde_json::to_vec_pretty(&meta)?)
            .map_err(|e| anyhow::anyhow!("{}: {}", side.display(), zcpipe_sys::errno_words(&e)))?;
        Ok(path)
    }

    /// At the end: the output off (nothing scans a camera buffer out any more), then every
    /// frame held goes back.
    fn drain(&mut self) -> Drained {
        if self.pending.is_some() {
            let _ = self.out.wait_flip(Duration::from_millis(100));
        }
        self.out.blank();
        // The detections reader's socket goes too (open fds before exit = after set-up).
        self.dets = None;
        let held = self.on_screen.is_some() as u64 + self.pending.as_ref().is_some_and(|p| p.frame.is_some()) as u64;
        self.on_screen = None;
        self.pending = None;
        for (_, (fb, _)) in self.imports.drain() {
            self.out.remove_fb(fb);
        }
        for fb in self.stale.drain(..) {
            self.out.remove_fb(fb);
        }
        for d in self.compose.drain(..).chain(self.overlay.drain(..)) {
            self.out.free_dumb(d);
        }
        Drained {
            said: format!("the output is off, {held} frames held went back; "),
            extras: vec![("buffers_returned_at_end", held.into())],
            result: Ok(()),
        }
    }

    /// Capture's frame rate as the display saw it: the capture sequence over capture time.
    fn fps_captured(&self) -> Option<f64> {
        let ((s0, t0), (s1, t1)) = (self.first_capture?, self.last_capture?);
        (s1 > s0 && t1 > t0).then(|| (s1 - s0) as f64 / ((t1 - t0) as f64 / 1e9))
    }

    fn report(&self, ctx: &StageCtx, final_report: bool, extras: impl Into<Facts>) -> StageReport {
        let way = match self.way.as_ref().map(|w| &w.2) {
            Some(Way::ZeroCopy { .. }) => "zero-copy scanout".to_string(),
            Some(Way::Compose { why, .. }) => format!("CPU composition ({why})"),
            None => "nothing shown yet".into(),
        };
        let (w, h) = self.out.mode_size();
        let mut facts: Facts = extras.into();
        facts.put(&DisplayFacts {
            display: Some(DisplayReport {
                card: self.out.path.display().to_string(),
                driver: self.out.driver.clone(),
                connector: self.out.connector_name.clone(),
                mode: format!("{w}x{h}"),
                atomic: self.out.atomic,
                way,
                fps_shown: self.span.fps(),
                fps_captured: self.fps_captured(),
                counters: self.counters,
                tap: self.tap.counters(),
            }),
        });
        // In copy mode the frames came as bytes over the tap's data socket (`copy_in`), as
        // the scale and infer stages report theirs.
        StageReport {
            frames_in: self.counters.received,
            frames_out: self.counters.shown,
            out_span: Some(self.span),
            copy_in: self.tap.copy_counters(),
            ..ctx.report(self.start, final_report, facts)
        }
    }
}

/// The detections of `latest` (boxes in its frame's pixels, else `frame`'s) on the screen
/// with the picture at `pic`.
fn drawn(latest: &super::detections::Latest, frame: (u32, u32), pic: Rect) -> Vec<Drawn> {
    let f = if latest.frame.0 > 0 && latest.frame.1 > 0 { latest.frame } else { frame };
    latest
        .dets
        .iter()
        .map(|d| Drawn {
            bbox: box_on_screen(d.bbox, f, pic),
            class_id: d.class_id,
            label: d.label.clone(),
            score: d.score,
            track_id: d.track_id,
        })
        .collect()
}

/// The sidecar of a writeback picture: how it was made and where the picture, the zones,
/// lines and masks, and the boxes are on it.
fn meta(
    cfg: &DisplayConfig,
    way: &str,
    layout: &FrameLayout,
    seq: u64,
    mode: (u32, u32),
    pic: Rect,
    latest: Option<&super::detections::Latest>,
) -> serde_json::Value {
    let boxes: Vec<[f32; 4]> = latest
        .map(|l| drawn(l, (layout.width, layout.height), pic).into_iter().map(|d| d.bbox).collect())
        .unwrap_or_default();
    let mut meta = serde_json::json!({
        "way": way,
        "seq": seq,
        "fourcc": layout.fourcc.to_string(),
        "frame": [layout.width, layout.height],
        "mode": [mode.0, mode.1],
        "picture": pic,
        "boxes": boxes,
    });
    for (k, v) in OnScreen::of(cfg, latest, (layout.width, layout.height), pic).meta() {
        meta[k] = v;
    }
    meta
}

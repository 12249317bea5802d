//! The input side of [`MppCapture`]: the demuxer (ffmpeg) feeding MPP, and a network
//! stream's loss and reconnect.

use super::*;

impl MppCapture {
    /// Puts stream bytes into MPP: `true` if some were taken (or the end was put).
    pub(super) fn feed(&mut self) -> Result<bool> {
        if self.pending_at >= self.pending.len() {
            self.pending.clear();
            self.pending_at = 0;
            match self.read_stream()? {
                Some(0) if !self.eos_put && !self.live() => {
                    // The file's end: MPP flushes its last pictures and sends EOS.
                    self.eos_put = true;
                    let ok = self.mpp.put_packet(&[], 0, true).map_err(|e| anyhow!("{}: {e:#}", self.shown))?;
                    return Ok(ok);
                }
                Some(n) if n > 0 => {}
                _ => return Ok(false),
            }
        }
        let chunk = &self.pending[self.pending_at..];
        if self.mpp.put_packet(chunk, 0, false).map_err(|e| anyhow!("{}: {e:#}", self.shown))? {
            self.stats.packets += 1;
            self.stats.stream_bytes += chunk.len() as u64;
            self.pending_at = self.pending.len();
            Ok(true)
        } else {
            self.stats.input_full += 1;
            Ok(false)
        }
    }

    /// Reads what the demuxer has now (never blocks): `Some(n)` bytes (0: its end, for a
    /// file), `None` when nothing is there yet (or the link is down).
    fn read_stream(&mut self) -> Result<Option<usize>> {
        use std::io::Read;
        if self.eos_put {
            return Ok(None);
        }
        let live = self.live();
        let url = self.url().to_string();
        let Link::Up { ffmpeg, last_data, since, .. } = &mut self.link else {
            self.reconnect_due()?;
            return Ok(None);
        };
        let since = *since;
        let Some(out) = ffmpeg.stdout() else { return Ok(None) };
        if !readable(out, Duration::ZERO).map_err(|e| anyhow!("{}: poll on the demuxer's output: {e}", self.shown))? {
            let quiet = *last_data;
            if live && quiet.elapsed() > IO_TIMEOUT + STALL_GRACE {
                ffmpeg.kill();
                self.lost(&format!("no data for {} s", quiet.elapsed().as_secs()), since);
            }
            return Ok(None);
        }
        self.pending.resize(CHUNK_BYTES, 0);
        let n = loop {
            match out.read(&mut self.pending) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => bail!("{}: reading the demuxer's output: {e}", self.shown),
            }
        };
        self.pending.truncate(n);
        if n > 0 {
            *last_data = Instant::now();
            return Ok(Some(n));
        }
        // The demuxer's end.
        let st = ffmpeg.wait();
        let tail = scrub_secrets(&ffmpeg.stderr_tail(), &url);
        let ok = st.as_ref().is_ok_and(|s| s.success());
        let st = st.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
        if !live {
            if !ok {
                // A file cut short: what was read is decoded, then the end.
                self.stats.demuxer_errors += 1;
                log::warn!("{}: the demuxer (ffmpeg) ended with {st} after {} bytes: {tail}; decoding what came (a file cut short?)", self.shown, self.stats.stream_bytes);
            }
            return Ok(Some(0));
        }
        self.lost(&format!("the stream ended; ffmpeg {st}: {tail}"), since);
        Ok(None)
    }

    /// The URL (for scrubbing), or "" for a file.
    fn url(&self) -> &str {
        match &self.input {
            MppInput::Network(u) => u,
            MppInput::File(_) => "",
        }
    }

    /// A network stream started at `since` dropped (`why`): one warning, the decoder reset
    /// (its partial picture and queued packets dropped; the frames consumers hold stay
    /// valid), the demuxer re-opened after the back-off.
    fn lost(&mut self, why: &str, since: Instant) {
        let now = Instant::now();
        let delivered = self.last_picture.is_some_and(|l| l >= since);
        if delivered {
            self.stats.drops += 1;
            if self.gap.is_none() {
                self.gap = Some((now, self.last_picture));
            }
            log::warn!(
                "camera {}: stream dropped ({why}); reconnecting (back-off {}..{} s, the pipeline stays up)",
                self.shown,
                self.backoff.as_secs(),
                BACKOFF_MAX.as_secs()
            );
        } else {
            self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
            log::info!("camera {}: not back yet ({why}); next attempt in {} s", self.shown, self.backoff.as_secs());
        }
        if let Err(e) = self.mpp.reset() {
            log::warn!("{}: {e:#}", self.shown);
        }
        self.pending.clear();
        self.pending_at = 0;
        self.link = Link::Down { at: now + self.backoff };
    }

    /// Re-opens the demuxer once the back-off is over.
    fn reconnect_due(&mut self) -> Result<()> {
        if let Link::Down { at } = self.link {
            if Instant::now() >= at {
                let (ffmpeg, tee) = self.spawn_demuxer()?;
                self.link = Link::Up { ffmpeg, since: Instant::now(), last_data: Instant::now(), _tee: tee };
            }
        }
        Ok(())
    }

    /// A picture was published: closes a gap (counted, and handed to the next frame's
    /// restart notice) and resets the back-off.
    pub(super) fn picture_arrived(&mut self) {
        let now = Instant::now();
        self.backoff = BACKOFF_FIRST;
        if let Some((dropped_at, last)) = self.gap.take() {
            let gap = now - last.unwrap_or(dropped_at);
            let lost = ((gap.as_secs_f64() * self.fps).round() as u64).saturating_sub(1);
            self.stats.reconnects += 1;
            self.stats.frames_lost += lost;
            self.stats.gap_s += gap.as_secs_f64();
            self.pending_gap = Some(lost);
            log::info!(
                "camera {}: back after {:.1} s without frames; ~{lost} frames lost (reconnect {})",
                self.shown,
                gap.as_secs_f64(),
                self.stats.reconnects
            );
        }
        self.last_picture = Some(now);
    }

    /// Waits until the demuxer has bytes or `deadline`, at most a few ms (MPP's decoding
    /// goes on meanwhile).
    pub(super) fn wait_input(&mut self, deadline: Instant) {
        let left = deadline.saturating_duration_since(Instant::now()).min(Duration::from_millis(3));
        match &mut self.link {
            Link::Up { ffmpeg, .. } if self.pending_at >= self.pending.len() && !self.eos_put => {
                if let Some(out) = ffmpeg.stdout() {
                    let _ = readable(out, left);
                    return;
                }
                std::thread::sleep(left);
            }
            _ => std::thread::sleep(left),
        }
    }

    /// ffmpeg demuxing the input to the raw elementary stream on its stdout and, when the
    /// camera is recorded, to MPEG-TS on its fd 3 for the recorder (the packets as they
    /// came: [`crate::record::TEE_ARGS`]), with the reader of that pipe.
    pub(super) fn spawn_demuxer(&self) -> Result<(Child, Option<crate::record::Tee>)> {
        let mut args: Vec<String> = ["-nostdin", "-loglevel", "error"].iter().map(|s| s.to_string()).collect();
        let list = match &self.input {
            MppInput::File(p) => {
                args.push("-i".into());
                args.push(p.display().to_string());
                None
            }
            MppInput::Network(u) => {
                let input = net_input(u, self.opts.transport);
                args.extend(input.args);
                Some(input.list)
            }
        };
        args.extend(["-an", "-sn", "-dn", "-c:v", "copy", "-f", self.muxer, "pipe:1"].iter().map(|s| s.to_string()));
        let teed = crate::record::tee_for(self.record.as_deref(), &self.shown, &self.probe)?;
        let (write, tee) = match teed {
            Some((w, t)) => {
                args.extend(crate::record::TEE_ARGS.iter().map(|s| s.to_string()));
                (Some(w), Some(t))
            }
            None => (None, None),
        };
        let child = Child::spawn_teed("ffmpeg", &args, list.as_deref().map(str::as_bytes), write)
            .map_err(|e| anyhow!("{}: {e:#}", self.shown))?;
        Ok((child, tee))
    }

    /// The demuxer's last words (scrubbed), or that it is not running.
    pub(super) fn demuxer_tail(&self) -> String {
        match &self.link {
            Link::Up { ffmpeg, .. } => scrub_secrets(&ffmpeg.stderr_tail(), self.url()),
            Link::Down { .. } => "not running".into(),
        }
    }
}

//! `zcpipe watch [PATH]`: connect to a detections socket and print what arrives.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};

use super::schema::SocketLine;
use super::stage::human_line;
use crate::core::config::default_detections_socket as default_socket_path;

/// What `zcpipe watch` watches, and how it prints it.
#[derive(Clone, Debug)]
pub struct WatchConfig {
    /// Detections socket; `None`: `instance`'s default ([`default_socket_path`]).
    pub path: Option<PathBuf>,
    /// The instance whose default socket is watched (and named in the error when nothing
    /// publishes there).
    pub instance: String,
    /// Print each frame's line as it came (raw JSON) instead of a readable line.
    pub json: bool,
    /// Exit after this many frames (`None`: until the stream ends).
    pub count: Option<u64>,
}

/// How a detections stream read by [`print_stream`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamEnd {
    /// The publisher's end line (`{"type":"end",...}`) arrived.
    EndLine,
    /// `count` lines were read.
    Count,
    /// The stop flag was set.
    Stopped,
    /// Whoever reads the output went away (a broken pipe: `zcpipe watch | head`).
    OutputClosed,
    /// The input ended without an end line.
    Eof,
}

/// Reads a detections stream (`input`: what the socket sends, one JSON line per frame, see
/// [`super::schema`]) and writes each line to `out`: as it came with `json`, else a frame's
/// readable line ([`human_line`]); a line that is not a frame is logged and skipped (passed
/// on with `json`). Stops at the end line (not written), after `count` lines (read, whether
/// readable or not), when `stop` is set or `out` is a broken pipe, or at EOF; returns which.
///
/// Errors if `input` cannot be read (an I/O error, or a line that is not UTF-8) or `out`
/// cannot be written (other than a broken pipe).
pub fn print_stream(input: impl BufRead, mut out: impl Write, json: bool, count: Option<u64>, stop: &AtomicBool) -> Result<StreamEnd> {
    for (n, line) in (1u64..).zip(input.lines()) {
        if stop.load(Ordering::Relaxed) {
            return Ok(StreamEnd::Stopped);
        }
        let line = line.context("reading the detections socket")?;
        let frame = match SocketLine::parse(&line) {
            Ok(SocketLine::End(_)) => {
                log::info!("stream ended: {line}");
                return Ok(StreamEnd::EndLine);
            }
            Ok(SocketLine::Frame(f)) => Ok(f),
            Err(e) => Err(e),
        };
        let written = match frame {
            // --json passes every other line on as it came, read or not.
            _ if json => writeln!(out, "{line}"),
            Ok(f) => writeln!(out, "{}", human_line(&f)),
            Err(e) => {
                log::warn!("unreadable line ({e}): {line}");
                Ok(())
            }
        };
        match written {
            // `zcpipe watch | head`: the reader is done, and so are we.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(StreamEnd::OutputClosed),
            r => r?,
        }
        if count.is_some_and(|c| n >= c) {
            return Ok(StreamEnd::Count);
        }
    }
    Ok(StreamEnd::Eof)
}

/// Connects to the detections socket and prints each frame (readable, or raw with
/// `json`) until the stream ends, `count` frames arrived, or `stop` is set (a signal);
/// the reading is [`print_stream`]'s.
///
/// Errors if the socket cannot be connected, or closes without the publisher's end line
/// (`{"type":"end",...}`): the publish stage died, or dropped this client for taking
/// nothing for 5 s.
pub fn watch(args: WatchConfig, stop: &AtomicBool) -> Result<()> {
    let path = args.path.clone().unwrap_or_else(|| default_socket_path(&args.instance));
    let s = UnixStream::connect(&path).with_context(|| {
        let run = if args.instance == "default" { "zcpipe run".to_string() } else { format!("zcpipe run --instance {}", args.instance) };
        format!("no zcpipe is publishing at {}: start `{run}`, or pass the socket path given to --publish", path.display())
    })?;
    if print_stream(BufReader::new(s), std::io::stdout().lock(), args.json, args.count, stop)? == StreamEnd::Eof {
        anyhow::bail!(
            "{} closed without an end of stream: the publish stage died, or dropped this client for taking nothing for 5 s",
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::DetectionServer;
    use super::*;

    /// Runs `watch` on a fresh server's socket, lets `end` finish the stream once the
    /// watcher is connected, and returns what `watch` returned.
    fn watch_until(end: impl FnOnce(DetectionServer)) -> Result<()> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.sock");
        let mut srv = DetectionServer::bind(&path).unwrap();
        let cfg = WatchConfig { path: Some(path), instance: "default".into(), json: false, count: None };
        static NEVER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let watcher = std::thread::spawn(move || watch(cfg, &NEVER));
        let t = Instant::now();
        while srv.stats().clients == 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "watch never connected");
            std::thread::sleep(Duration::from_millis(5));
            srv.service();
        }
        end(srv);
        watcher.join().unwrap()
    }

    #[test]
    fn print_stream_prints_each_frame_until_the_end_line() {
        use super::super::schema::{DetectionJson, EndJson, FrameJson, LatencyJson};
        static NEVER: AtomicBool = AtomicBool::new(false);
        let frame = SocketLine::Frame(FrameJson {
            seq: 3,
            timestamp_ns: 7,
            width: 640,
            height: 480,
            latency_us: LatencyJson { total: 12345.0, ..Default::default() },
            detections: vec![DetectionJson { class_id: 0, label: "person".into(), score: 0.5, bbox: [1.0, 2.0, 3.0, 4.0] }],
        })
        .to_line()
        .unwrap();
        let end = SocketLine::End(EndJson { end: true, frames: 1, reason: "end of stream".into() }).to_line().unwrap();
        let input = format!("{frame}not json\n{end}{frame}");
        let run = |input: &[u8], json, count| {
            let mut out = Vec::new();
            let r = print_stream(input, &mut out, json, count, &NEVER);
            (r.map_err(|e| format!("{e:#}")), String::from_utf8(out).unwrap())
        };
        let readable = "frame 3 (640x480, 12.3 ms): person 0.50 [1,2,3,4]\n".to_string();
        assert_eq!(run(input.as_bytes(), false, None), (Ok(StreamEnd::EndLine), readable.clone()));
        assert_eq!(run(input.as_bytes(), true, None), (Ok(StreamEnd::EndLine), format!("{frame}not json\n")));
        assert_eq!(run(input.as_bytes(), true, Some(1)), (Ok(StreamEnd::Count), frame.clone()));
        assert_eq!(run(frame.as_bytes(), false, None), (Ok(StreamEnd::Eof), readable.clone()));
        let not_utf8 = [frame.as_bytes(), b"\xff\n"].concat();
        assert_eq!(run(&not_utf8, false, None), (Err("reading the detections socket: stream did not contain valid UTF-8".into()), readable));
    }

    #[test]
    fn the_end_line_ends_watch_and_eof_without_it_is_an_error() {
        watch_until(|mut srv| srv.close_all("end of stream", 0)).expect("the end line is a clean end");
        let e = watch_until(drop).expect_err("EOF without the end line");
        assert!(e.to_string().contains("closed without an end of stream"), "{e}");
    }
}

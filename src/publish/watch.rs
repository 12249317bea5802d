//! `zcpipe watch [PATH]`: connect to a detections socket and print what arrives.

use std::io::{BufRead, BufReader, Write as _};
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

/// Connects to the detections socket and prints each frame (readable, or raw with
/// `json`) until the stream ends, `count` frames arrived, or `stop` is set (a signal).
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
    let mut finished = false;
    let out = std::io::stdout();
    for (n, line) in (1u64..).zip(BufReader::new(s).lines()) {
        if stop.load(Ordering::Relaxed) {
            finished = true;
            break;
        }
        let line = line.context("reading the detections socket")?;
        let frame = match SocketLine::parse(&line) {
            Ok(SocketLine::End(_)) => {
                log::info!("stream ended: {line}");
                finished = true;
                break;
            }
            Ok(SocketLine::Frame(f)) => Ok(f),
            Err(e) => Err(e),
        };
        let mut o = out.lock();
        let written = match frame {
            // --json passes every other line on as it came, read or not.
            _ if args.json => writeln!(o, "{line}"),
            Ok(f) => writeln!(o, "{}", human_line(&f)),
            Err(e) => {
                log::warn!("unreadable line ({e}): {line}");
                Ok(())
            }
        };
        match written {
            // `zcpipe watch | head`: the reader is done, and so are we.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                finished = true;
                break;
            }
            r => r?,
        }
        if args.count.is_some_and(|c| n >= c) {
            finished = true;
            break;
        }
    }
    if !finished {
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
    fn the_end_line_ends_watch_and_eof_without_it_is_an_error() {
        watch_until(|mut srv| srv.close_all("end of stream", 0)).expect("the end line is a clean end");
        let e = watch_until(drop).expect_err("EOF without the end line");
        assert!(e.to_string().contains("closed without an end of stream"), "{e}");
    }
}

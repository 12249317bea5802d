//! `zcpipe watch [PATH]`: connect to a detections socket and print what arrives.

use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::net::UnixStream;

use anyhow::{Context, Result};

use crate::cli::WatchArgs;

use super::{stage::human_line, FrameJson};
use crate::core::config::default_detections_socket as default_socket_path;

/// Connects to the detections socket and prints each frame (readable, or raw with
/// `--json`) until the stream ends, `--count` frames arrived, or a signal.
///
/// Errors if the socket closes without the publisher's end line (`{"end":true,...}`): the
/// publish stage died, or dropped this client for taking nothing for 5 s.
pub fn watch(args: WatchArgs) -> Result<()> {
    let path = args.path.clone().unwrap_or_else(|| default_socket_path(&args.instance));
    let s = UnixStream::connect(&path).with_context(|| {
        let run = if args.instance == "default" { "zcpipe run".to_string() } else { format!("zcpipe run --instance {}", args.instance) };
        format!("no zcpipe is publishing at {}: start `{run}`, or pass the socket path given to --publish", path.display())
    })?;
    let mut finished = false;
    let out = std::io::stdout();
    for (n, line) in (1u64..).zip(BufReader::new(s).lines()) {
        if crate::cli::signals::STOP.load(std::sync::atomic::Ordering::Relaxed) {
            finished = true;
            break;
        }
        let line = line.context("reading the detections socket")?;
        if line.contains("\"end\":true") {
            log::info!("stream ended: {line}");
            finished = true;
            break;
        }
        let mut o = out.lock();
        let written = if args.json {
            writeln!(o, "{line}")
        } else {
            match serde_json::from_str::<FrameJson>(&line) {
                Ok(f) => writeln!(o, "{}", human_line(&f)),
                Err(e) => {
                    log::warn!("unreadable line ({e}): {line}");
                    Ok(())
                }
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

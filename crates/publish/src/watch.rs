//! `zcpipe watch [PATH]`: connect to a detections socket and print what arrives.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Result;

use super::schema::{NoticeJson, SocketLine};
use super::stage::human_line;
use super::tracking::human_event;
use zcpipe_core::config::default_detections_socket as default_socket_path;

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
    /// Only this camera's frames, notices and events (`--camera NAME`); `None`: every camera's.
    pub camera: Option<String>,
    /// Only event lines (`--events`; `count` then counts events).
    pub events: bool,
    /// How long to keep trying to reconnect after the socket closed without an end line
    /// (`--reconnect-for`, default [`RECONNECT_FOR`]).
    pub reconnect_for: Duration,
}

/// How long `zcpipe watch` keeps trying by default to reconnect after the socket closed
/// without an end line (the publish stage died: `zcpipe run` or systemd restarts it).
pub const RECONNECT_FOR: Duration = Duration::from_secs(30);

/// Frames of other cameras `zcpipe watch --camera NAME` skips before it says which cameras
/// it saw (none of NAME having come).
pub(crate) const SKIPPED_HINT: u64 = 100;

/// How a detections stream read by [`print_stream`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamEnd {
    /// The publisher's end line (`{"type":"end",...}`) arrived.
    EndLine,
    /// `count` frames were read.
    Count,
    /// The stop flag was set.
    Stopped,
    /// Whoever reads the output went away (a broken pipe: `zcpipe watch | head`).
    OutputClosed,
    /// The input ended (EOF, or the connection was reset) without an end line.
    Eof,
}

/// The readable line of a notice: `notice: the infer stage restarted (7 frames lost);
/// frame 1234 follows`, or for a network camera that came back, `notice: the camera
/// reconnected after 12.3 s (192 frames lost); frame 1234 follows`.
pub fn notice_line(n: &NoticeJson) -> String {
    if n.event == "config_changed" {
        return format!("notice: changed: {}", n.change.as_deref().unwrap_or("the run's configuration"));
    }
    let of = if n.camera.is_empty() { String::new() } else { format!(" of camera {}", n.camera) };
    if n.event == "reconnected" {
        let who = if n.camera.is_empty() { "the camera".to_string() } else { format!("camera {}", n.camera) };
        let after = n.gap_s.map(|g| format!(" after {g:.1} s")).unwrap_or_default();
        return format!("notice: {who} reconnected{after} ({} frames lost); frame {} follows", n.frames_lost, n.seq);
    }
    format!("notice: the {} stage {} ({} frames lost); frame {}{of} follows", n.stage, n.event, n.frames_lost, n.seq)
}

/// Reads a detections stream (`input`: what the socket sends, one JSON line each, see
/// [`super::schema`]) and writes each line to `out`: as it came with `json`, else a frame's
/// readable line ([`human_line`]) or a notice's ([`notice_line`]); a line that is not a
/// frame or a notice is logged and skipped (passed on with `json`). Counts frame lines in
/// `frames` (kept across reconnects). Stops at the end line (not written), once `frames`
/// reaches `count`, when `stop` is set or `out` is a broken pipe, or at EOF (a reset
/// connection reads as EOF: the publisher died); returns which.
///
/// Errors if a line is not UTF-8, another read error than a reset or EOF, or `out` cannot
/// be written (other than a broken pipe).
pub fn print_stream(
    input: impl BufRead,
    out: impl Write,
    json: bool,
    count: Option<u64>,
    frames: &mut u64,
    stop: &AtomicBool,
) -> Result<StreamEnd> {
    print_camera(input, out, json, count, frames, stop, Filter::default())
}

/// Which lines `zcpipe watch` shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Filter<'a> {
    /// Only this camera's (`--camera NAME`); `None`: every camera's.
    pub camera: Option<&'a str>,
    /// Only event lines and restart notices (`--events`: a restart may have ended tracks
    /// without their events); frames are skipped, and `count` counts events.
    pub(crate) events_only: bool,
}

/// [`print_stream`] of the lines `filter` keeps: with a camera, frames, notices and events
/// of other cameras are skipped and not counted (a notice about a stage that serves every
/// camera is kept); with `events_only`, only event lines, clip lines and notices are written, and
/// `count` (and `frames`) count events instead of frames.
pub(crate) fn print_camera(
    input: impl BufRead,
    mut out: impl Write,
    json: bool,
    count: Option<u64>,
    frames: &mut u64,
    stop: &AtomicBool,
    filter: Filter<'_>,
) -> Result<StreamEnd> {
    let camera = filter.camera;
    // Cameras whose frames were skipped, while none of `camera` came: said once after
    // SKIPPED_HINT lines, so a misspelt name is not a silent wait.
    let mut others: std::collections::BTreeSet<String> = Default::default();
    let mut skipped = 0u64;
    for line in input.lines() {
        if stop.load(Ordering::Relaxed) {
            return Ok(StreamEnd::Stopped);
        }
        let line = match line {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(anyhow::Error::new(e).context("reading the detections socket"))
            }
            Err(_) => return Ok(StreamEnd::Eof),
        };
        let parsed = SocketLine::parse(&line);
        let other_camera = |c: &str| camera.is_some_and(|want| want != c);
        if let Ok(SocketLine::Frame(f)) = &parsed {
            if other_camera(&f.camera) {
                skipped += 1;
                if skipped == SKIPPED_HINT && *frames == 0 {
                    others.insert(f.camera.clone());
                    let seen: Vec<&str> = others.iter().map(String::as_str).collect();
                    log::warn!(
                        "{SKIPPED_HINT} frames and none of camera {}; cameras seen: {}",
                        camera.unwrap_or(""),
                        seen.join(", ")
                    );
                } else if skipped < SKIPPED_HINT {
                    others.insert(f.camera.clone());
                }
                continue;
            }
        }
        if matches!(&parsed, Ok(SocketLine::Notice(n)) if !n.camera.is_empty() && other_camera(&n.camera)) {
            continue;
        }
        if matches!(&parsed, Ok(SocketLine::Event(e)) if other_camera(&e.camera))
            || matches!(&parsed, Ok(SocketLine::Clip(c)) if other_camera(&c.camera))
            || (filter.events_only && matches!(&parsed, Ok(SocketLine::Frame(_))))
        {
            continue;
        }
        let is_counted = if filter.events_only {
            matches!(parsed, Ok(SocketLine::Event(_)))
        } else {
            matches!(parsed, Ok(SocketLine::Frame(_)))
        };
        let written = match parsed {
            Ok(SocketLine::End(_)) => {
                log::info!("stream ended: {line}");
                return Ok(StreamEnd::EndLine);
            }
            // --json passes every other line on as it came, read or not.
            _ if json => writeln!(out, "{line}"),
            Ok(SocketLine::Frame(f)) if f.camera.is_empty() => writeln!(out, "{}", human_line(&f)),
            Ok(SocketLine::Frame(f)) => writeln!(out, "{}: {}", f.camera, human_line(&f)),
            Ok(SocketLine::Notice(n)) => writeln!(out, "{}", notice_line(&n)),
            Ok(SocketLine::Event(e)) if e.camera.is_empty() => writeln!(out, "{}", human_event(&e)),
            Ok(SocketLine::Event(e)) => writeln!(out, "{}: {}", e.camera, human_event(&e)),
            Ok(SocketLine::Clip(c)) => writeln!(out, "{}: {}", c.camera, crate::recorded::human_clip(&c)),
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
        if is_counted {
            *frames += 1;
            if count.is_some_and(|c| *frames >= c) {
                return Ok(StreamEnd::Count);
            }
        }
    }
    Ok(StreamEnd::Eof)
}

/// Connects to the detections socket and prints each frame (readable, or raw with
/// `json`) and each notice until the stream ends (the end line), `count` frames arrived,
/// or `stop` is set (a signal); the reading is [`print_stream`]'s. When the socket closes
/// without the end line (the publish stage died and is being restarted, or dropped this
/// client for taking nothing for 5 s) it reconnects by itself, trying for up to
/// `reconnect_for` (back-off 50 ms doubling to 1 s).
///
/// Errors if the socket cannot be connected at first, or nothing publishes there again
/// within `reconnect_for`.
pub fn watch(args: WatchConfig, stop: &AtomicBool) -> Result<()> {
    let path = args.path.clone().unwrap_or_else(|| default_socket_path(&args.instance));
    let mut s = match UnixStream::connect(&path) {
        Ok(s) => s,
        // The socket is there, but not for us: its mode or its directory's keep this user out.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => anyhow::bail!(
            "{}: permission denied: the run's user, or a member of its --socket-group, may connect; ask its owner to add you to that group",
            path.display()
        ),
        Err(e) => {
            let run = if args.instance == "default" {
                "zcpipe run".to_string()
            } else {
                format!("zcpipe run --instance {}", args.instance)
            };
            return Err(anyhow::Error::new(e).context(format!(
                "no zcpipe is publishing at {}: start `{run}`, or pass the socket path given to --publish",
                path.display()
            )));
        }
    };
    let mut frames = 0u64;
    loop {
        if print_camera(
            BufReader::new(s),
            std::io::stdout().lock(),
            args.json,
            args.count,
            &mut frames,
            stop,
            Filter { camera: args.camera.as_deref(), events_only: args.events },
        )? != StreamEnd::Eof
        {
            return Ok(());
        }
        log::warn!("{} closed without an end of stream (the publish stage died, or dropped this client for taking nothing for 5 s); reconnecting", path.display());
        s = reconnect(&path, args.reconnect_for, stop).ok_or_else(|| {
            anyhow::anyhow!(
                "{} closed without an end of stream and nothing published there again within {:.1} s (--reconnect-for): the publish stage died and was not restarted",
                path.display(),
                args.reconnect_for.as_secs_f64()
            )
        })?;
        log::info!("reconnected to {}", path.display());
    }
}

/// Connects to `path` again, with back-off (50 ms doubling to 1 s), for up to `within`;
/// `None` if nothing listens there by then or `stop` is set.
fn reconnect(path: &std::path::Path, within: Duration, stop: &AtomicBool) -> Option<UnixStream> {
    zcpipe_core::schema::connect_retrying(path, Some(within), Duration::from_millis(50), Duration::from_secs(1), stop)
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::super::DetectionServer;
    use super::*;

    #[test]
    fn a_reconnect_is_said_as_one_with_its_gap() {
        let n = NoticeJson {
            stage: "capture".into(),
            camera: "front".into(),
            event: "reconnected".into(),
            frames_lost: 192,
            seq: 1234,
            gap_s: Some(12.3),
            change: None,
        };
        assert_eq!(
            notice_line(&n),
            "notice: camera front reconnected after 12.3 s (192 frames lost); frame 1234 follows"
        );
        let one = NoticeJson { camera: String::new(), gap_s: None, ..n.clone() };
        assert_eq!(notice_line(&one), "notice: the camera reconnected (192 frames lost); frame 1234 follows");
        let restart = NoticeJson { event: "restarted".into(), ..n };
        assert_eq!(
            notice_line(&restart),
            "notice: the capture stage restarted (192 frames lost); frame 1234 of camera front follows"
        );
    }

    /// Waits until `srv` has a client.
    fn wait_client(srv: &mut DetectionServer) {
        let t = Instant::now();
        while srv.stats().clients == 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "watch never connected");
            std::thread::sleep(Duration::from_millis(5));
            srv.service();
        }
    }

    /// Runs `watch` on a fresh server's socket (reconnecting for `reconnect_for`), lets `end`
    /// finish the stream once the watcher is connected, and returns what `watch` returned.
    fn watch_until(reconnect_for: Duration, end: impl FnOnce(DetectionServer, &std::path::Path)) -> Result<()> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.sock");
        let mut srv = DetectionServer::bind(&path).unwrap();
        let cfg = WatchConfig {
            path: Some(path.clone()),
            instance: "default".into(),
            json: false,
            count: None,
            camera: None,
            events: false,
            reconnect_for,
        };
        static NEVER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let watcher = std::thread::spawn(move || watch(cfg, &NEVER));
        wait_client(&mut srv);
        end(srv, &path);
        watcher.join().unwrap()
    }

    /// `--events` keeps the event lines (counted) of the camera asked for, and nothing else.
    #[test]
    fn print_camera_events_only() {
        use super::super::schema::{EventJson, FrameJson};
        static NEVER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let frame = |camera: &str| {
            SocketLine::Frame(FrameJson {
                camera: camera.into(),
                seq: 1,
                timestamp_ns: 1,
                width: 64,
                height: 48,
                latency_us: Default::default(),
                detections: vec![],
                zones: None,
                skipped: None,
                npu: Default::default(),
                ..Default::default()
            })
            .to_line()
            .unwrap()
        };
        let event = |camera: &str, event: &str, zone: Option<&str>| {
            let e = EventJson {
                event: event.into(),
                camera: camera.into(),
                track_id: 3,
                label: "person".into(),
                class_id: 0,
                score: 0.912,
                zone: zone.map(Into::into),
                first_seen_ns: 1,
                last_seen_ns: 2,
                timestamp_ns: 2,
                seq: Some(7),
                bbox: [1.0, 2.0, 3.0, 4.0],
                ..Default::default()
            };
            SocketLine::Event(e).to_line().unwrap()
        };
        let notice = SocketLine::Notice(NoticeJson {
            stage: "infer".into(),
            camera: String::new(),
            event: "restarted".into(),
            frames_lost: 2,
            seq: 5,
            gap_s: None,
            change: None,
        })
        .to_line()
        .unwrap();
        let input = [
            frame("front"),
            event("front", "new", None),
            notice,
            event("door", "new", None),
            event("front", "entered_zone", Some("gate")),
            frame("front"),
            event("front", "end", None),
        ]
        .concat();
        let mut out = Vec::new();
        let mut n = 0;
        let only = Filter { camera: Some("front"), events_only: true };
        let r = print_camera(input.as_bytes(), &mut out, false, Some(2), &mut n, &NEVER, only).unwrap();
        assert_eq!((r, n), (StreamEnd::Count, 2), "--count counts events");
        let out = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(
            lines[0].starts_with("front: event new: person #3 (0.91) at ") && lines[0].ends_with(", frame 7"),
            "{out}"
        );
        assert_eq!(lines[1], "notice: the infer stage restarted (2 frames lost); frame 5 follows");
        assert!(lines[2].starts_with("front: event entered_zone gate: person #3 (0.91) at "), "{out}");
        let mut out = Vec::new();
        let mut n = 0;
        print_camera(
            input.as_bytes(),
            &mut out,
            true,
            None,
            &mut n,
            &NEVER,
            Filter { camera: None, events_only: true },
        )
        .unwrap();
        let out = String::from_utf8(out).unwrap();
        assert_eq!((n, out.lines().count()), (4, 5), "{out}");
        assert!(
            out.lines().all(|l| l.starts_with("{\"type\":\"event\"") || l.starts_with("{\"type\":\"notice\"")),
            "{out}"
        );
    }

    /// `--camera` keeps one camera's frames (counted) and notices, and skips the rest.
    #[test]
    fn print_camera_keeps_one_cameras_lines() {
        use super::super::schema::FrameJson;
        static NEVER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let frame = |camera: &str, seq: u64| {
            SocketLine::Frame(FrameJson {
                camera: camera.into(),
                seq,
                timestamp_ns: 1,
                width: 64,
                height: 48,
                latency_us: Default::default(),
                detections: vec![],
                zones: None,
                skipped: None,
                npu: Default::default(),
                ..Default::default()
            })
            .to_line()
            .unwrap()
        };
        let notice = |camera: &str| {
            SocketLine::Notice(NoticeJson {
                stage: "capture".into(),
                camera: camera.into(),
                event: "restarted".into(),
                frames_lost: 2,
                seq: 5,
                gap_s: None,
                change: None,
            })
            .to_line()
            .unwrap()
        };
        let input =
            [frame("front", 1), frame("door", 1), notice("door"), notice("front"), frame("front", 2), frame("door", 2)]
                .concat();
        let mut out = Vec::new();
        let mut frames = 0;
        let r = print_camera(
            input.as_bytes(),
            &mut out,
            false,
            None,
            &mut frames,
            &NEVER,
            Filter { camera: Some("front"), events_only: false },
        )
        .unwrap();
        let out = String::from_utf8(out).unwrap();
        assert_eq!((r, frames), (StreamEnd::Eof, 2));
        assert_eq!(out, "front: frame 1 (64x48, 0.0 ms): nothing\nnotice: the capture stage restarted (2 frames lost); frame 5 of camera front follows\nfront: frame 2 (64x48, 0.0 ms): nothing\n");
        let mut all = Vec::new();
        let mut n = 0;
        print_camera(input.as_bytes(), &mut all, true, Some(3), &mut n, &NEVER, Filter::default()).unwrap();
        assert_eq!(n, 3, "no filter: every camera's frames count");
    }

    #[test]
    fn events_shows_a_closed_clip_s_file_and_the_camera_filter_keeps_other_cameras_clips_out() {
        static NEVER: AtomicBool = AtomicBool::new(false);
        let clip = |camera: &str| {
            SocketLine::Clip(super::super::schema::ClipJson {
                camera: camera.into(),
                id: 7,
                start_ms: 1_000,
                end_ms: 13_500,
                complete: true,
                reason: None,
                labels: vec!["person".into()],
                tracks: vec![4],
                zones: vec![],
                bytes: 2_500_000,
                path: format!("/clips/{camera}/a.mp4"),
                url: None,
                thumbnail: None,
            })
            .to_line()
            .unwrap()
        };
        let input = [clip("door"), clip("front")].concat();
        let mut out = Vec::new();
        let filter = Filter { camera: Some("front"), events_only: true };
        print_camera(input.as_bytes(), &mut out, false, None, &mut 0, &NEVER, filter).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "front: clip /clips/front/a.mp4 (12.5 s, 2.5 MB; person #4)\n");
    }

    #[test]
    fn print_stream_prints_each_frame_and_notice_until_the_end_line() {
        use super::super::schema::{DetectionJson, EndJson, FrameJson, LatencyJson};
        static NEVER: AtomicBool = AtomicBool::new(false);
        let frame = SocketLine::Frame(FrameJson {
            camera: String::new(),
            seq: 3,
            timestamp_ns: 7,
            width: 640,
            height: 480,
            latency_us: LatencyJson { total: 12345.0, ..Default::default() },
            detections: vec![DetectionJson {
                class_id: 0,
                label: "person".into(),
                score: 0.5,
                bbox: [1.0, 2.0, 3.0, 4.0],
                track_id: None,
                ..Default::default()
            }],
            zones: None,
            skipped: None,
            npu: Default::default(),
            ..Default::default()
        })
        .to_line()
        .unwrap();
        let notice = SocketLine::Notice(NoticeJson {
            stage: "scale".into(),
            camera: String::new(),
            event: "restarted".into(),
            frames_lost: 4,
            seq: 9,
            gap_s: None,
            change: None,
        })
        .to_line()
        .unwrap();
        let end = SocketLine::End(EndJson { end: true, frames: 1, reason: "end of stream".into() }).to_line().unwrap();
        let input = format!("{notice}{frame}not json\n{end}{frame}");
        let run = |input: &[u8], json, count| {
            let mut out = Vec::new();
            let mut frames = 0;
            let r = print_stream(input, &mut out, json, count, &mut frames, &NEVER);
            (r.map_err(|e| format!("{e:#}")), String::from_utf8(out).unwrap())
        };
        let readable = "frame 3 (640x480, 12.3 ms): person 0.50 [1,2,3,4]\n".to_string();
        let said = "notice: the scale stage restarted (4 frames lost); frame 9 follows\n";
        assert_eq!(run(input.as_bytes(), false, None), (Ok(StreamEnd::EndLine), format!("{said}{readable}")));
        assert_eq!(run(input.as_bytes(), true, None), (Ok(StreamEnd::EndLine), format!("{notice}{frame}not json\n")));
        assert_eq!(
            run(input.as_bytes(), true, Some(1)),
            (Ok(StreamEnd::Count), format!("{notice}{frame}")),
            "--count counts frames"
        );
        assert_eq!(run(frame.as_bytes(), false, None), (Ok(StreamEnd::Eof), readable.clone()));
        let not_utf8 = [frame.as_bytes(), b"\xff\n"].concat();
        assert_eq!(
            run(&not_utf8, false, None),
            (Err("reading the detections socket: stream did not contain valid UTF-8".into()), readable)
        );
    }

    #[test]
    fn the_end_line_ends_watch_and_eof_without_it_is_an_error_once_nothing_comes_back() {
        watch_until(Duration::from_millis(300), |mut srv, _| srv.close_all("end of stream", 0))
            .expect("the end line is a clean end");
        let e = watch_until(Duration::from_millis(300), |srv, _| drop(srv))
            .expect_err("EOF without the end line, nobody back");
        assert!(
            e.to_string().contains("closed without an end of stream and nothing published there again within 0.3 s"),
            "{e}"
        );
    }

    /// A publisher that dies (no end line) and comes back on the same path: watch
    /// reconnects by itself and ends cleanly on the new publisher's end line.
    #[test]
    fn watch_reconnects_to_a_restarted_publisher() {
        watch_until(Duration::from_secs(10), |srv, path| {
            drop(srv);
            let mut again = DetectionServer::bind(path).unwrap();
            wait_client(&mut again);
            again.close_all("end of stream", 0);
        })
        .expect("reconnected and ended on the end line");
    }
}

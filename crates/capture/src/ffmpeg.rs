//! What the ffmpeg-backed sources share (`video:PATH` in [`super::video`], network streams in
//! [`super::network`]): an ffmpeg or ffprobe child with its stdout piped and its stderr
//! drained by a thread that keeps the tail ([`Child`]), the one-line error when the tool is
//! missing ([`tool_error`]), ffprobe's JSON read into a size and rate ([`parse_probe`]), and
//! the reader of one packed NV12 frame into a pool buffer at its stride
//! ([`read_packed_nv12`]).

use std::ffi::OsStr;
use std::io::{ErrorKind, Read};
use std::process::{ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde::Deserialize;

use zcpipe_core::frame::FrameLayout;

/// How much of ffmpeg's stderr is kept for error messages, in bytes (the tail).
pub(crate) const STDERR_TAIL_BYTES: usize = 4096;

/// The most bytes [`Child::spawn_fed`] writes to a tool's stdin (well within a pipe's
/// buffer of 64 KiB).
pub(crate) const FED_INPUT_MAX: usize = 16 * 1024;

/// The hint every "ffmpeg/ffprobe is missing" error carries.
pub(crate) const INSTALL_FFMPEG_HINT: &str = "install ffmpeg (apt-get install ffmpeg)";

/// Turns a spawn failure into one line, with the install hint when the tool is missing.
pub(crate) fn tool_error(tool: &str, e: std::io::Error) -> anyhow::Error {
    if e.kind() == ErrorKind::NotFound {
        anyhow::anyhow!("{tool} not found in PATH: {INSTALL_FFMPEG_HINT}")
    } else {
        anyhow::anyhow!("cannot run {tool}: {e}")
    }
}

/// What a child's stdin is.
#[derive(Clone, Copy)]
enum Input<'a> {
    /// /dev/null.
    Null,
    /// These bytes, then closed.
    Fed(&'a [u8]),
    /// A pipe the caller writes.
    Piped,
}

/// An ffmpeg/ffprobe child process: stdin closed, stdout piped (taken by [`Child::stdout`]),
/// stderr read to its end by a thread that keeps the last [`STDERR_TAIL_BYTES`] (a tool
/// must never block on a full stderr pipe). Dropping it kills and reaps the process and
/// joins the thread, so no zombie is left.
pub struct Child {
    child: std::process::Child,
    stdout: Option<ChildStdout>,
    tail: Arc<Mutex<Vec<u8>>>,
    thread: Option<JoinHandle<()>>,
    reaped: Option<ExitStatus>,
}

impl Child {
    /// Starts `tool` (`ffmpeg`, `ffprobe`) with `args`. Errors: the tool is missing (with
    /// [`INSTALL_FFMPEG_HINT`]) or cannot be started.
    pub fn spawn<I, S>(tool: &str, args: I) -> anyhow::Result<Child>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Child::spawn_fed(tool, args, None)
    }

    /// As [`Child::spawn`], with `input` (at most [`FED_INPUT_MAX`] bytes, so that it fits
    /// the pipe's buffer and the write never waits on the tool) on the tool's stdin, which
    /// is closed after it: how a network input reaches ffmpeg without its URL in the
    /// command line ([`super::network::net_input`]).
    pub(crate) fn spawn_fed<I, S>(tool: &str, args: I, input: Option<&[u8]>) -> anyhow::Result<Child>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Child::spawn_teed(tool, args, input, None)
    }

    /// An encoder: `tool` with `args`, its stdin a pipe the caller writes raw frames to
    /// (returned), its fd 3 the write end `tee` (as [`Child::spawn_teed`]).
    pub(crate) fn spawn_encoder<I, S>(
        tool: &str,
        args: I,
        tee: std::os::fd::OwnedFd,
    ) -> anyhow::Result<(Child, std::process::ChildStdin)>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut child = Child::spawn_with(tool, args, Input::Piped, Some(tee))?;
        let stdin = child.child.stdin.take().ok_or_else(|| anyhow::anyhow!("{tool} has no stdin pipe"))?;
        Ok((child, stdin))
    }

    /// As [`Child::spawn_fed`], and with `tee` the write end of a pipe the tool gets as its
    /// fd 3 (`pipe:3`: ffmpeg's second output, the camera's encoded stream for the
    /// recorder). The tool's end is closed here once it started.
    pub(crate) fn spawn_teed<I, S>(
        tool: &str,
        args: I,
        input: Option<&[u8]>,
        tee: Option<std::os::fd::OwnedFd>,
    ) -> anyhow::Result<Child>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Child::spawn_with(tool, args, input.map_or(Input::Null, Input::Fed), tee)
    }

    fn spawn_with<I, S>(
        tool: &str,
        args: I,
        input: Input<'_>,
        tee: Option<std::os::fd::OwnedFd>,
    ) -> anyhow::Result<Child>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        if matches!(input, Input::Fed(i) if i.len() > FED_INPUT_MAX) {
            anyhow::bail!("the input given to {tool} is over {FED_INPUT_MAX} bytes: use a shorter URL");
        }
        let mut cmd = Command::new(tool);
        cmd.args(args)
            .stdin(if matches!(input, Input::Null) { Stdio::null() } else { Stdio::piped() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(fd) = tee.as_ref().map(|t| t.as_raw_fd()) {
            // SAFETY: between fork and exec only dup2(2), which is async-signal-safe, runs;
            // `fd` stays open in the parent until spawn returns. dup2 to 3 clears
            // close-on-exec on the copy, so the tool inherits fd 3 and nothing else of ours.
            unsafe {
                cmd.pre_exec(move || {
                    if fd == 3 {
                        let flags = libc::fcntl(3, libc::F_GETFD);
                        if flags < 0 || libc::fcntl(3, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    } else if libc::dup2(fd, 3) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().map_err(|e| tool_error(tool, e))?;
        drop(tee);
        if let Input::Fed(input) = input {
            let Some(mut stdin) = child.stdin.take() else { anyhow::bail!("{tool} has no stdin pipe") };
            // Within the pipe's 64 KiB buffer: written at once whatever the tool is doing.
            // A tool that died already gives EPIPE, seen when it is waited for.
            if let Err(e) = stdin.write_all(input) {
                log::debug!("writing {tool}'s input: {e}");
            }
        }
        let stdout = child.stdout.take();
        let tail = Arc::new(Mutex::new(Vec::new()));
        let thread = child.stderr.take().map(|mut err| {
            let tail = Arc::clone(&tail);
            std::thread::spawn(move || {
                let mut chunk = [0u8; 1024];
                loop {
                    match err.read(&mut chunk) {
                        Ok(0) => break,
                        Ok(n) => {
                            if let Ok(mut t) = tail.lock() {
                                t.extend_from_slice(&chunk[..n]);
                                let excess = t.len().saturating_sub(STDERR_TAIL_BYTES);
                                t.drain(..excess);
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        Err(_) => break,
                    }
                }
            })
        });
        Ok(Child { child, stdout, tail, thread, reaped: None })
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The child's stdout, until [`Child::close_stdout`] (`None` after).
    pub fn stdout(&mut self) -> Option<&mut ChildStdout> {
        self.stdout.as_mut()
    }

    /// Closes our end of the child's stdout (a writer then gets EPIPE).
    pub(crate) fn close_stdout(&mut self) {
        self.stdout = None;
    }

    /// The kept tail of stderr, trimmed, its lines joined with ` | ` on one line
    /// (`(no stderr)` if it printed nothing).
    pub(crate) fn stderr_tail(&self) -> String {
        let t = self.tail.lock().map(|t| t.clone()).unwrap_or_default();
        let s = String::from_utf8_lossy(&t);
        let s = s.split(['\n', '\r']).map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" | ");
        if s.is_empty() {
            "(no stderr)".to_string()
        } else {
            s
        }
    }

    /// The exit status if the child has exited (reaped then, the stderr reader joined);
    /// `None` while it runs. Never blocks.
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.reaped.is_none() {
            if let Some(st) = self.child.try_wait()? {
                self.reaped = Some(st);
                self.join_reader();
            }
        }
        Ok(self.reaped)
    }

    /// Waits for the child to exit (after its stdout ended), reaps it and joins the stderr
    /// reader.
    pub fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.stdout = None;
        if let Some(st) = self.reaped {
            return Ok(st);
        }
        let st = self.child.wait()?;
        self.reaped = Some(st);
        self.join_reader();
        Ok(st)
    }

    /// Kills the child (SIGKILL) if it still runs and reaps it.
    pub fn kill(&mut self) {
        self.stdout = None;
        if self.reaped.is_none() {
            let _ = self.child.kill();
            if let Ok(st) = self.child.wait() {
                self.reaped = Some(st);
            }
        }
        self.join_reader();
    }

    /// Reads all of the child's stdout (for ffprobe, whose output is small; call after it
    /// exited, when the read cannot block).
    pub(crate) fn read_stdout(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Some(mut s) = self.stdout.take() {
            let _ = s.read_to_end(&mut out);
        }
        out
    }

    fn join_reader(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Child {
    /// Kills the child (if still running) and reaps it.
    fn drop(&mut self) {
        self.kill();
    }
}

/// Size and rate of a stream's first video stream, as ffprobe reports them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VideoProbe {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// `r_frame_rate` (or `avg_frame_rate` when that is the saner one) as frames per
    /// second (0 if ffprobe gave none, e.g. `0/0`).
    pub fps: f64,
    /// The codec, when it is one a clip can hold without re-encoding (H.264, H.265).
    pub codec: Option<zcpipe_core::ts::Codec>,
}

/// The ffprobe arguments that print the first video stream's size and rates as JSON; the
/// input (`-i` or a path) follows.
pub(crate) const PROBE_ARGS: [&str; 8] = [
    "-v",
    "error",
    "-select_streams",
    "v:0",
    "-show_entries",
    "stream=codec_name,pix_fmt,width,height,r_frame_rate,avg_frame_rate",
    "-of",
    "json",
];

#[derive(Deserialize)]
struct ProbeJson {
    #[serde(default)]
    streams: Vec<ProbeStream>,
}

#[derive(Deserialize)]
struct ProbeStream {
    codec_name: Option<String>,
    pix_fmt: Option<String>,
    width: Option<u32>,
    height: Option<u32>,
    r_frame_rate: Option<String>,
    avg_frame_rate: Option<String>,
}

/// Reads ffprobe's JSON ([`PROBE_ARGS`]). `Err` is the reason without the input's name
/// (`it has no video stream; ...`), for the caller to put after it.
pub(crate) fn parse_probe(json: &[u8]) -> Result<VideoProbe, String> {
    let parsed: ProbeJson =
        serde_json::from_slice(json).map_err(|e| format!("ffprobe printed unexpected JSON ({e})"))?;
    let stream = parsed
        .streams
        .first()
        .ok_or("it has no video stream; pass a file with video, or --source image:PATH for stills")?;
    let (Some(width), Some(height)) = (stream.width, stream.height) else {
        return Err("ffprobe reported no frame size".into());
    };
    if width == 0 || height == 0 {
        return Err(format!("its video stream has no picture ffprobe could decode (size {width}x{height}: headers without a frame, or a stream cut before its first picture)"));
    }
    if width > 16384 || height > 16384 {
        return Err(format!("frame size {width}x{height} out of range 1..=16384"));
    }
    let r = stream.r_frame_rate.as_deref().and_then(parse_rate);
    let avg = stream.avg_frame_rate.as_deref().and_then(parse_rate);
    // A live stream's r_frame_rate is often a time base guess (90000/1, 180000/1): then the
    // average, if it looks like a frame rate, is the better one.
    let fps = match (r, avg) {
        (Some(r), Some(a)) if r > 240.0 && a <= 240.0 => a,
        (Some(r), _) => r,
        (None, Some(a)) => a,
        (None, None) => 0.0,
    };
    let codec = stream.codec_name.as_deref().and_then(zcpipe_core::ts::Codec::from_name);
    Ok(VideoProbe { width, height, fps, codec })
}

/// A video stream's codec and pixel format, as ffprobe names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CodecProbe {
    /// `h264`, `hevc`, `mjpeg`, `vp9`, ...
    pub codec: String,
    /// `yuv420p`, `yuvj420p`, `yuv420p10le`, ... (`None`: not said, e.g. before decoding
    /// starts on some live streams).
    pub pix_fmt: Option<String>,
}

/// The first video stream's codec and pixel format from ffprobe's JSON ([`PROBE_ARGS`]);
/// `None` if it named no codec.
pub(crate) fn parse_codec(json: &[u8]) -> Option<CodecProbe> {
    let parsed: ProbeJson = serde_json::from_slice(json).ok()?;
    let s = parsed.streams.into_iter().next()?;
    Some(CodecProbe { codec: s.codec_name?, pix_fmt: s.pix_fmt })
}

/// The last non-empty line of a tool's stderr, trimmed.
pub(crate) fn last_line(stderr: &str) -> &str {
    stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim()
}

/// Parses an ffmpeg rational rate (`30000/1001`, `10/1`, `25`) into frames per second;
/// `None` for `0/0` or anything not positive and finite.
pub(crate) fn parse_rate(s: &str) -> Option<f64> {
    let v = match s.split_once('/') {
        Some((n, d)) => n.trim().parse::<f64>().ok()? / d.trim().parse::<f64>().ok()?,
        None => s.trim().parse::<f64>().ok()?,
    };
    (v.is_finite() && v > 0.0).then_some(v)
}

/// Reads until `buf` is full or EOF; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// What reading one frame from a packed NV12 stream gave.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FrameRead {
    /// A whole frame.
    Full,
    /// End of stream before the first byte of a frame.
    Eof,
    /// End of stream inside a frame: `got` of `expected` bytes.
    Short {
        /// Bytes read.
        got: usize,
        /// Bytes a frame has.
        expected: usize,
    },
}

/// Reads one tightly packed NV12 frame (rows of `even(width)` bytes: `even(height)` luma
/// rows then `even(height)/2` CbCr rows, as ffmpeg's rawvideo muxer writes it) into `dst`
/// at `l`'s bytesperline. One read when the row sizes match, else one per row; the stride
/// padding of `dst` is not touched. `dst` must hold `l.bytes_needed()` bytes.
pub(crate) fn read_packed_nv12(r: &mut impl Read, dst: &mut [u8], l: &FrameLayout) -> std::io::Result<FrameRead> {
    let row = l.width.div_ceil(2) as usize * 2;
    let bpl = l.planes[0].bytesperline as usize;
    // Y rows then CbCr rows; both planes share bpl and are contiguous in [`FrameLayout::nv12`].
    let rows = l.height.div_ceil(2) as usize * 3;
    let expected = row * rows;
    let mut got = 0usize;
    if row == bpl {
        got = read_full(r, &mut dst[..expected])?;
    } else {
        for i in 0..rows {
            let n = read_full(r, &mut dst[i * bpl..i * bpl + row])?;
            got += n;
            if n < row {
                break;
            }
        }
    }
    Ok(match got {
        0 => FrameRead::Eof,
        g if g == expected => FrameRead::Full,
        g => FrameRead::Short { got: g, expected },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_packed_nv12_detects_eof_and_short_frames() {
        let l = FrameLayout::nv12(6, 4, 16); // rows of 6 bytes into bytesperline 16, 6 rows
        let frame: Vec<u8> = (1..=36).collect();
        let mut dst = vec![0u8; l.bytes_needed() as usize];
        let mut two = std::io::Cursor::new([frame.clone(), frame.clone(), frame[..10].to_vec()].concat());
        assert_eq!(read_packed_nv12(&mut two, &mut dst, &l).unwrap(), FrameRead::Full);
        assert_eq!(&dst[..6], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(&dst[16..22], &[7, 8, 9, 10, 11, 12]);
        assert_eq!(&dst[5 * 16..5 * 16 + 6], &[31, 32, 33, 34, 35, 36]);
        assert!(dst[6..16].iter().all(|&b| b == 0), "stride padding untouched");
        assert_eq!(read_packed_nv12(&mut two, &mut dst, &l).unwrap(), FrameRead::Full);
        assert_eq!(read_packed_nv12(&mut two, &mut dst, &l).unwrap(), FrameRead::Short { got: 10, expected: 36 });
        let mut empty = std::io::Cursor::new(Vec::<u8>::new());
        assert_eq!(read_packed_nv12(&mut empty, &mut dst, &l).unwrap(), FrameRead::Eof);
        // Matching widths: one read of the whole frame.
        let l16 = FrameLayout::nv12(16, 2, 16);
        let mut dst16 = vec![0u8; l16.bytes_needed() as usize];
        let mut c = std::io::Cursor::new(vec![7u8; 48]);
        assert_eq!(read_packed_nv12(&mut c, &mut dst16, &l16).unwrap(), FrameRead::Full);
        assert!(dst16.iter().all(|&b| b == 7));
    }

    #[test]
    fn parse_probe_reads_size_and_a_sane_rate() {
        let p =
            parse_probe(br#"{"streams":[{"width":768,"height":432,"r_frame_rate":"10/1","avg_frame_rate":"10/1"}]}"#)
                .unwrap();
        assert_eq!(p, VideoProbe { width: 768, height: 432, fps: 10.0, codec: None });
        // A live stream's time-base guess gives way to the average rate.
        let p =
            parse_probe(br#"{"streams":[{"width":64,"height":48,"r_frame_rate":"90000/1","avg_frame_rate":"25/1"}]}"#)
                .unwrap();
        assert_eq!(p.fps, 25.0);
        let p = parse_probe(br#"{"streams":[{"width":64,"height":48,"r_frame_rate":"0/0","avg_frame_rate":"0/0"}]}"#)
            .unwrap();
        assert_eq!(p.fps, 0.0);
        assert!(parse_probe(br#"{"streams":[]}"#).unwrap_err().contains("no video stream"));
        assert!(parse_probe(br#"{"streams":[{"width":0,"height":48}]}"#)
            .unwrap_err()
            .contains("no picture ffprobe could decode"));
        assert!(parse_probe(br#"{"streams":[{"width":20000,"height":48}]}"#).unwrap_err().contains("out of range"));
        assert!(parse_probe(b"nope").unwrap_err().contains("unexpected JSON"));
        assert_eq!(
            parse_codec(br#"{"streams":[{"codec_name":"hevc","pix_fmt":"yuv420p10le","width":64,"height":48}]}"#),
            Some(CodecProbe { codec: "hevc".into(), pix_fmt: Some("yuv420p10le".into()) })
        );
        assert_eq!(parse_codec(br#"{"streams":[]}"#), None);
    }

    #[test]
    fn child_keeps_the_stderr_tail_and_reaps() {
        let mut c = Child::spawn("sh", ["-c", "echo one >&2; echo two >&2; exit 3"]).unwrap();
        let st = c.wait().unwrap();
        assert_eq!(st.code(), Some(3));
        assert_eq!(c.stderr_tail(), "one | two");
    }

    // qemu-user (make test-aarch64) runs glibc's posix_spawn as a plain fork, so an exec that
    // fails is not reported to spawn: the x86_64 run covers it.
    #[test]
    #[cfg_attr(
        target_arch = "aarch64",
        ignore = "qemu-user does not report a failed exec to posix_spawn; run natively"
    )]
    fn a_missing_tool_is_named_with_the_fix() {
        let e = Child::spawn("/nonexistent/ffmpeg-tool", ["-h"]).err().unwrap().to_string();
        assert!(e.contains("not found in PATH") && e.contains(INSTALL_FFMPEG_HINT), "{e}");
    }
}

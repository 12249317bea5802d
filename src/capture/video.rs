//! `video:PATH` source: any file ffmpeg decodes, as NV12.
//!
//! `ffprobe` reads the first video stream's size and `r_frame_rate` at open; then
//! `ffmpeg -nostdin -loglevel error -noautorotate -i PATH -an -f rawvideo -pix_fmt nv12
//! -vf pad=ceil(iw/2)*2:ceil(ih/2)*2 pipe:1` decodes it. Its stdout carries tightly packed
//! NV12 (rows of `even(width)` bytes), which [`FrameSource::fill`] reads straight into the
//! pool buffer at `bytesperline = align_up(even(width), 16)`: one `read_exact` when the two
//! widths match, else one per row. There is no intermediate frame buffer. Dropping the
//! source kills and reaps ffmpeg.

use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use anyhow::{bail, Context};
use serde::Deserialize;

use super::image::STRIDE_ALIGN;
use super::{FrameSource, SourceInfo};
use crate::core::frame::FrameLayout;

/// How much of ffmpeg's stderr is kept for error messages, in bytes (the tail).
pub const STDERR_TAIL_BYTES: usize = 4096;

/// The hint every "ffmpeg/ffprobe is missing" error carries.
pub const INSTALL_FFMPEG_HINT: &str = "install ffmpeg (apt-get install ffmpeg)";

/// Size and rate of a file's first video stream, as ffprobe reports them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VideoProbe {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// `r_frame_rate` as frames per second (0 if ffprobe gave none, e.g. `0/0`).
    pub fps: f64,
}

#[derive(Deserialize)]
struct ProbeJson {
    #[serde(default)]
    streams: Vec<ProbeStream>,
}

#[derive(Deserialize)]
struct ProbeStream {
    width: Option<u32>,
    height: Option<u32>,
    r_frame_rate: Option<String>,
}

/// Runs `ffprobe -v error -select_streams v:0 -show_entries stream=width,height,r_frame_rate
/// -of json PATH` and parses its JSON. Errors name the path and the fix.
pub fn probe(path: &Path) -> anyhow::Result<VideoProbe> {
    if !path.is_file() {
        bail!(
            "cannot open video {}: no such file (check the path; `--source auto` plays the bundled clip)",
            path.display()
        );
    }
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_entries", "stream=width,height,r_frame_rate", "-of", "json"])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| tool_error("ffprobe", e))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last_line = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
    if !out.status.success() {
        bail!("cannot probe video {}: ffprobe failed ({}): {last_line}; is it a video file ffmpeg can decode?", path.display(), out.status);
    }
    let parsed: ProbeJson = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("cannot probe video {}: ffprobe printed unexpected JSON", path.display()))?;
    let stream = parsed.streams.first().with_context(|| {
        format!("cannot probe video {}: it has no video stream; pass a file with video, or --source image:PATH for stills", path.display())
    })?;
    let (Some(width), Some(height)) = (stream.width, stream.height) else {
        bail!("cannot probe video {}: ffprobe reported no frame size", path.display());
    };
    if width == 0 || height == 0 || width > 16384 || height > 16384 {
        bail!("cannot open video {}: frame size {width}x{height} out of range 1..=16384", path.display());
    }
    let fps = stream.r_frame_rate.as_deref().and_then(parse_rate).unwrap_or(0.0);
    Ok(VideoProbe { width, height, fps })
}

/// Parses an ffmpeg rational rate (`30000/1001`, `10/1`, `25`) into frames per second;
/// `None` for `0/0` or anything not positive and finite.
pub fn parse_rate(s: &str) -> Option<f64> {
    let v = match s.split_once('/') {
        Some((n, d)) => n.trim().parse::<f64>().ok()? / d.trim().parse::<f64>().ok()?,
        None => s.trim().parse::<f64>().ok()?,
    };
    (v.is_finite() && v > 0.0).then_some(v)
}

/// Turns a spawn failure into one line, with the install hint when the tool is missing.
fn tool_error(tool: &str, e: std::io::Error) -> anyhow::Error {
    if e.kind() == ErrorKind::NotFound {
        anyhow::anyhow!("{tool} not found in PATH: {INSTALL_FFMPEG_HINT}")
    } else {
        anyhow::anyhow!("cannot run {tool}: {e}")
    }
}

/// Frames decoded by an ffmpeg child process.
pub struct VideoSource {
    info: SourceInfo,
    path: PathBuf,
    layout: FrameLayout,
    child: Child,
    stdout: Option<ChildStdout>,
    stderr_tail: Arc<Mutex<Vec<u8>>>,
    stderr_thread: Option<JoinHandle<()>>,
    /// Frames delivered so far.
    frames: u64,
    /// Set once the stream ended (cleanly or not); later fills return `Ok(None)`.
    finished: bool,
}

impl VideoSource {
    /// Probes `path` and starts ffmpeg on it. `fps` overrides the probed `r_frame_rate`
    /// (a stream without one reports 30).
    pub fn open(path: &Path, fps: Option<f64>) -> anyhow::Result<VideoSource> {
        let p = probe(path)?;
        let layout = FrameLayout::nv12(p.width, p.height, STRIDE_ALIGN);
        let mut child = Command::new("ffmpeg")
            // -noautorotate: frames keep the coded size ffprobe reported, even for clips
            // with a rotation tag (autorotation would swap width and height under us).
            .args(["-nostdin", "-loglevel", "error", "-noautorotate", "-i"])
            .arg(path)
            .args(["-an", "-f", "rawvideo", "-pix_fmt", "nv12", "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", "pipe:1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| tool_error("ffmpeg", e))?;
        let stdout = child.stdout.take();
        let stderr_tail = Arc::new(Mutex::new(Vec::new()));
        // ffmpeg must never block on a full stderr pipe: drain it, keeping the tail.
        let stderr_thread = child.stderr.take().map(|mut err| {
            let tail = Arc::clone(&stderr_tail);
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
        let fps = fps.unwrap_or(if p.fps > 0.0 { p.fps } else { 30.0 });
        let info = SourceInfo {
            description: format!("video:{} {}x{} NV12 @{}fps", path.display(), p.width, p.height, fps),
            max_width: p.width,
            max_height: p.height,
            fps,
            max_frame_bytes: layout.bytes_needed(),
        };
        Ok(VideoSource {
            info,
            path: path.to_path_buf(),
            layout,
            child,
            stdout,
            stderr_tail,
            stderr_thread,
            frames: 0,
            finished: false,
        })
    }

    /// Frames delivered so far.
    pub fn frames_read(&self) -> u64 {
        self.frames
    }

    /// The last [`STDERR_TAIL_BYTES`] of ffmpeg's stderr, trimmed, on one line.
    fn stderr_tail(&self) -> String {
        let t = self.stderr_tail.lock().map(|t| t.clone()).unwrap_or_default();
        let s = String::from_utf8_lossy(&t);
        let s = s.split(['\n', '\r']).map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" | ");
        if s.is_empty() { "(no stderr)".to_string() } else { s }
    }

    /// Waits for ffmpeg to exit after its stdout ended and joins the stderr reader;
    /// `Err` with the stderr tail if it exited non-zero.
    fn reap(&mut self) -> anyhow::Result<()> {
        self.finished = true;
        self.stdout = None;
        let status = self.child.wait().with_context(|| format!("video {}: cannot wait for ffmpeg", self.path.display()))?;
        if let Some(t) = self.stderr_thread.take() {
            let _ = t.join();
        }
        if !status.success() {
            bail!("video {}: ffmpeg failed ({status}) after {} frames: {}", self.path.display(), self.frames, self.stderr_tail());
        }
        Ok(())
    }
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

impl FrameSource for VideoSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    /// Reads the next frame into `dst`. `Ok(None)` at the end of the file (EOF on a frame
    /// boundary and ffmpeg exiting 0); `Err` with ffmpeg's stderr tail on a short frame or a
    /// non-zero exit.
    fn fill(&mut self, dst: &mut [u8]) -> anyhow::Result<Option<FrameLayout>> {
        if self.finished {
            return Ok(None);
        }
        let l = self.layout;
        let need = l.bytes_needed() as usize;
        if dst.len() < need {
            bail!("video {}: buffer of {} bytes is too small for a {}x{} NV12 frame ({need} bytes)", self.path.display(), dst.len(), l.width, l.height);
        }
        let Some(stdout) = self.stdout.as_mut() else {
            return Ok(None);
        };
        let res = read_packed_nv12(stdout, dst, &l)
            .with_context(|| format!("video {}: reading ffmpeg output", self.path.display()))?;
        match res {
            FrameRead::Full => {
                self.frames += 1;
                Ok(Some(l))
            }
            // End of stream: clean only at a frame boundary with ffmpeg exiting 0.
            FrameRead::Eof => {
                self.reap()?;
                Ok(None)
            }
            FrameRead::Short { got, expected } => {
                self.reap()?;
                bail!(
                    "video {}: short frame after {} frames ({got} of {expected} bytes): {}",
                    self.path.display(),
                    self.frames,
                    self.stderr_tail()
                )
            }
        }
    }
}

/// What reading one frame from a packed NV12 stream gave.
#[derive(Debug, PartialEq, Eq)]
enum FrameRead {
    /// A whole frame.
    Full,
    /// End of stream before the first byte of a frame.
    Eof,
    /// End of stream inside a frame: `got` of `expected` bytes.
    Short { got: usize, expected: usize },
}

/// Reads one tightly packed NV12 frame (rows of `even(width)` bytes: `even(height)` luma
/// rows then `even(height)/2` CbCr rows, as ffmpeg's rawvideo muxer writes it) into `dst`
/// at `l`'s bytesperline. One read when the row sizes match, else one per row; the stride
/// padding of `dst` is not touched. `dst` must hold `l.bytes_needed()` bytes.
fn read_packed_nv12(r: &mut impl Read, dst: &mut [u8], l: &FrameLayout) -> std::io::Result<FrameRead> {
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

impl Drop for VideoSource {
    /// Kills ffmpeg (if still running) and reaps it, so no zombie is left.
    fn drop(&mut self) {
        self.stdout = None;
        if !self.finished {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(t) = self.stderr_thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clip() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/one-by-one-person-detection.mp4")
    }

    #[test]
    fn video_source_reads_clip_first_frames() {
        let mut s = VideoSource::open(&clip(), None).unwrap();
        let info = s.info().clone();
        println!("{}", info.description);
        assert_eq!((info.max_width, info.max_height, info.fps), (768, 432, 10.0));
        assert_eq!(info.max_frame_bytes, 768 * 432 * 3 / 2);
        let mut buf = vec![0u8; info.max_frame_bytes as usize];
        let mut prev: Option<Vec<u8>> = None;
        for i in 0..3 {
            let l = s.fill(&mut buf).unwrap().expect("frame");
            assert_eq!((l.width, l.height, l.planes[0].bytesperline), (768, 432, 768));
            let luma = &buf[..768 * 432];
            let mean = luma.iter().map(|&v| v as u64).sum::<u64>() as f64 / luma.len() as f64;
            println!("frame {i}: luma mean {mean:.1}");
            assert!(luma.iter().any(|&v| v != 0));
            assert!(mean > 30.0 && mean < 230.0, "{mean}");
            if let Some(p) = &prev {
                assert_eq!(p.len(), buf.len());
            }
            prev = Some(buf.clone());
        }
        assert_eq!(s.frames_read(), 3);
    }

    /// Encodes `frames` frames of lavfi `testsrc` at 5 fps into `dir/name` (`.mp4`: H.264
    /// yuv420p; `.mkv`: FFV1 yuv444p, which allows odd sizes).
    fn make_clip(dir: &Path, name: &str, size: &str, frames: u32) -> PathBuf {
        let out = dir.join(name);
        let codec: &[&str] = if name.ends_with(".mkv") { &["-c:v", "ffv1", "-pix_fmt", "yuv444p"] } else { &["-pix_fmt", "yuv420p"] };
        let st = Command::new("ffmpeg")
            .args(["-nostdin", "-loglevel", "error", "-f", "lavfi", "-i"])
            .arg(format!("testsrc=size={size}:rate=5"))
            .args(["-frames:v", &frames.to_string()])
            .args(codec)
            .arg(&out)
            .status()
            .unwrap();
        assert!(st.success());
        out
    }

    #[test]
    fn video_source_tiny_clip_gives_exactly_3_frames_then_none() {
        let dir = tempfile::tempdir().unwrap();
        let p = make_clip(dir.path(), "tiny.mp4", "64x48", 3);
        let mut s = VideoSource::open(&p, None).unwrap();
        assert_eq!((s.info().max_width, s.info().max_height, s.info().fps), (64, 48, 5.0));
        let mut buf = vec![0u8; s.info().max_frame_bytes as usize];
        assert_eq!(buf.len(), 64 * 48 * 3 / 2);
        for _ in 0..3 {
            assert!(s.fill(&mut buf).unwrap().is_some());
        }
        assert!(s.fill(&mut buf).unwrap().is_none());
        assert!(s.fill(&mut buf).unwrap().is_none());
        assert_eq!(s.frames_read(), 3);
    }

    #[test]
    fn video_source_odd_size_rows_land_at_aligned_stride() {
        let dir = tempfile::tempdir().unwrap();
        // 75x45 (odd both ways): ffmpeg pads to 76x46 and the frame lands at bytesperline 80.
        let p = make_clip(dir.path(), "odd.mkv", "75x45", 2);
        let mut s = VideoSource::open(&p, None).unwrap();
        assert_eq!(s.info().max_frame_bytes, 80 * 46 * 3 / 2);
        let mut buf = vec![0xAAu8; s.info().max_frame_bytes as usize];
        let l = s.fill(&mut buf).unwrap().unwrap();
        assert_eq!((l.width, l.height, l.planes[0].bytesperline, l.planes[1].offset), (75, 45, 80, 80 * 46));
        // Stride padding (bytes 76..80 of each row) is never written.
        for r in 0..(46 + 23) {
            assert_eq!(&buf[r * 80 + 76..r * 80 + 80], &[0xAA; 4], "row {r}");
        }
        // lavfi testsrc's top-left is not black: luma row 0 carries picture.
        assert!(buf[..75].iter().any(|&v| v > 20));
        assert!(s.fill(&mut buf).unwrap().is_some());
        assert!(s.fill(&mut buf).unwrap().is_none());
    }

    #[test]
    fn video_source_missing_file_names_path() {
        let e = VideoSource::open(Path::new("/nonexistent/clip.mp4"), None).err().unwrap();
        println!("{e:#}");
        let msg = format!("{e:#}");
        assert!(msg.contains("/nonexistent/clip.mp4") && msg.contains("no such file"), "{msg}");
    }

    #[test]
    fn video_source_not_a_video_names_path() {
        let (_dir, p) = crate::testing::file_with("junk.mp4", b"definitely not a video");
        let e = VideoSource::open(&p, None).err().unwrap();
        let msg = format!("{e:#}");
        println!("{msg}");
        assert!(msg.contains("cannot probe video") && msg.contains(&p.display().to_string()), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }

    #[test]
    fn video_source_ffmpeg_killed_mid_stream_is_an_error() {
        let mut s = VideoSource::open(&clip(), None).unwrap();
        let mut buf = vec![0u8; s.info().max_frame_bytes as usize];
        s.fill(&mut buf).unwrap().unwrap();
        // Kill the ffmpeg this source started (by its pid): what is left in the pipe (less
        // than a frame) is a short frame or EOF, and the exit status is a failure.
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(s.child.id() as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
        let mut res = Ok(None);
        for _ in 0..10 {
            res = s.fill(&mut buf);
            if !matches!(res, Ok(Some(_))) {
                break;
            }
        }
        let msg = format!("{:#}", res.expect_err("killed ffmpeg must be an error"));
        println!("{msg}");
        assert!(msg.contains("ffmpeg failed") && msg.contains("one-by-one-person-detection.mp4"), "{msg}");
        assert!(s.fill(&mut buf).unwrap().is_none(), "after the error the source is finished");
    }

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
    fn video_source_drop_reaps_ffmpeg() {
        let mut s = VideoSource::open(&clip(), None).unwrap();
        let mut buf = vec![0u8; s.info().max_frame_bytes as usize];
        s.fill(&mut buf).unwrap().unwrap();
        let pid = s.child.id() as i32;
        drop(s);
        // The child has been waited for: the pid no longer exists (not even as a zombie).
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| s.contains(") Z ")).unwrap_or(false);
        assert!(!alive || !zombie, "ffmpeg {pid} left as a zombie");
        assert!(!alive, "ffmpeg {pid} still exists after drop");
    }
}

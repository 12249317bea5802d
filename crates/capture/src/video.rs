//! `video:PATH` source: any file ffmpeg decodes, as NV12.
//!
//! `ffprobe` reads the first video stream's size and `r_frame_rate` at open; then
//! `ffmpeg -nostdin -loglevel error -noautorotate -i PATH -an -f rawvideo -pix_fmt nv12
//! -vf pad=ceil(iw/2)*2:ceil(ih/2)*2 pipe:1` decodes it. Its stdout carries tightly packed
//! NV12 (rows of `even(width)` bytes), which [`FrameSource::fill`] reads straight into the
//! pool buffer at `bytesperline = align_up(even(width), 16)`: one `read_exact` when the two
//! widths match, else one per row. There is no intermediate frame buffer. Dropping the
//! source kills and reaps ffmpeg.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

pub(crate) use super::ffmpeg::VideoProbe;
use super::ffmpeg::{last_line, parse_probe, read_packed_nv12, tool_error, Child, FrameRead, PROBE_ARGS};
use super::image::STRIDE_ALIGN;
use super::{FrameSource, SourceInfo};
use zcpipe_core::frame::FrameLayout;

/// Runs `ffprobe -v error -select_streams v:0 -show_entries
/// stream=width,height,r_frame_rate,avg_frame_rate -of json PATH` and parses its JSON.
/// Errors name the path and the fix.
pub fn probe(path: &Path) -> anyhow::Result<VideoProbe> {
    check_file(path)?;
    let out = Command::new("ffprobe")
        .args(PROBE_ARGS)
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| tool_error("ffprobe", e))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        bail!(
            "cannot probe video {}: ffprobe failed ({}): {}; is it a video file ffmpeg can decode?",
            path.display(),
            out.status,
            last_line(&stderr)
        );
    }
    parse_probe(&out.stdout).map_err(|why| anyhow::anyhow!("cannot probe video {}: {why}", path.display()))
}

/// A `video:` path must name a file: there, readable, and a regular file (not a device such
/// as `/dev/urandom`, a directory or a pipe). Errors name the path, what it is, and the fix.
pub(crate) fn check_file(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let m = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "cannot open video {}: no such file (check the path; `--source auto` plays the bundled clip)",
            path.display()
        ),
        Err(e) => bail!("cannot open video {}: {e}", path.display()),
    };
    let t = m.file_type();
    let what = if t.is_dir() {
        "a directory (for a folder of pictures use image:DIR)"
    } else if t.is_char_device() || t.is_block_device() {
        "a device, not a video file (a camera is v4l2:/dev/videoN)"
    } else if t.is_fifo() || t.is_socket() {
        "a pipe or socket, not a video file"
    } else {
        return Ok(());
    };
    bail!("cannot open video {}: it is {what}", path.display())
}

/// Frames decoded by an ffmpeg child process.
pub(crate) struct VideoSource {
    info: SourceInfo,
    path: PathBuf,
    layout: FrameLayout,
    child: Child,
    /// The reader of the file's packets for the recorder (after `child`: dropped after it).
    _tee: Option<super::record::Tee>,
    /// Frames delivered so far.
    frames: u64,
    /// Set once the stream ended (cleanly or not); later fills return `Ok(None)`.
    finished: bool,
}

impl VideoSource {
    /// Probes `path` and starts ffmpeg on it. `fps` overrides the probed `r_frame_rate`
    /// (a stream without one reports 30).
    /// `record`: the camera's link to the recorder (the file's packets go to it too).
    pub fn open(
        path: &Path,
        fps: Option<f64>,
        record: Option<&super::record::Recording>,
    ) -> anyhow::Result<VideoSource> {
        let p = probe(path)?;
        let layout = FrameLayout::nv12(p.width, p.height, STRIDE_ALIGN);
        let mut args: Vec<std::ffi::OsString> =
            // -noautorotate: frames keep the coded size ffprobe reported, even for clips
            // with a rotation tag (autorotation would swap width and height under us).
            ["-nostdin", "-loglevel", "error", "-noautorotate", "-i"].iter().map(Into::into).collect();
        args.push(path.into());
        args.extend(
            ["-an", "-f", "rawvideo", "-pix_fmt", "nv12", "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", "pipe:1"]
                .iter()
                .map(Into::into),
        );
        let tee = super::record::tee_for(record, &path.display().to_string(), &p)?;
        let (fd, tee) = match tee {
            Some((fd, tee)) => {
                args.extend(super::record::TEE_ARGS.iter().map(Into::into));
                (Some(fd), Some(tee))
            }
            None => (None, None),
        };
        let child = Child::spawn_teed("ffmpeg", args, None, fd)?;
        let fps = fps.unwrap_or(if p.fps > 0.0 { p.fps } else { 30.0 });
        let info = SourceInfo {
            description: format!("video:{} {}x{} NV12 @{}fps", path.display(), p.width, p.height, fps),
            max_width: p.width,
            max_height: p.height,
            fps,
            max_frame_bytes: layout.bytes_needed(),
        };
        Ok(VideoSource { info, path: path.to_path_buf(), layout, child, _tee: tee, frames: 0, finished: false })
    }

    /// Frames delivered so far.
    #[cfg(test)]
    pub fn frames_read(&self) -> u64 {
        self.frames
    }

    /// Waits for ffmpeg to exit after its stdout ended and joins the stderr reader;
    /// `Err` with the stderr tail if it exited non-zero.
    fn reap(&mut self) -> anyhow::Result<()> {
        self.finished = true;
        let status =
            self.child.wait().with_context(|| format!("video {}: cannot wait for ffmpeg", self.path.display()))?;
        if !status.success() {
            bail!(
                "video {}: ffmpeg failed ({status}) after {} frames: {}",
                self.path.display(),
                self.frames,
                self.child.stderr_tail()
            );
        }
        Ok(())
    }
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
            bail!(
                "video {}: buffer of {} bytes is too small for a {}x{} NV12 frame ({need} bytes)",
                self.path.display(),
                dst.len(),
                l.width,
                l.height
            );
        }
        let Some(stdout) = self.child.stdout() else {
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
                    self.child.stderr_tail()
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_video_path_that_is_not_a_file_says_what_it_is() {
        let e = check_file(Path::new("/dev/urandom")).unwrap_err().to_string();
        assert!(e.contains("/dev/urandom: it is a device, not a video file"), "{e}");
        let e = check_file(Path::new("/")).unwrap_err().to_string();
        assert!(e.contains("it is a directory (for a folder of pictures use image:DIR)"), "{e}");
        let e = check_file(Path::new("/nonexistent/x.mp4")).unwrap_err().to_string();
        assert!(e.contains("no such file"), "{e}");
        check_file(&std::env::current_exe().unwrap()).unwrap();
    }

    use super::*;

    fn clip() -> PathBuf {
        zcpipe_core::data::source_root().join("tests/data/one-by-one-person-detection.mp4")
    }

    #[test]
    fn video_source_reads_clip_first_frames() {
        let mut s = VideoSource::open(&clip(), None, None).unwrap();
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
        let codec: &[&str] =
            if name.ends_with(".mkv") { &["-c:v", "ffv1", "-pix_fmt", "yuv444p"] } else { &["-pix_fmt", "yuv420p"] };
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
        let mut s = VideoSource::open(&p, None, None).unwrap();
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
        let mut s = VideoSource::open(&p, None, None).unwrap();
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
        let e = VideoSource::open(Path::new("/nonexistent/clip.mp4"), None, None).err().unwrap();
        println!("{e:#}");
        let msg = format!("{e:#}");
        assert!(msg.contains("/nonexistent/clip.mp4") && msg.contains("no such file"), "{msg}");
    }

    #[test]
    fn video_source_not_a_video_names_path() {
        let (_dir, p) = zcpipe_core::testing::file_with("junk.mp4", b"definitely not a video");
        let e = VideoSource::open(&p, None, None).err().unwrap();
        let msg = format!("{e:#}");
        println!("{msg}");
        assert!(msg.contains("cannot probe video") && msg.contains(&p.display().to_string()), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }

    #[test]
    fn video_source_ffmpeg_killed_mid_stream_is_an_error() {
        let mut s = VideoSource::open(&clip(), None, None).unwrap();
        let mut buf = vec![0u8; s.info().max_frame_bytes as usize];
        s.fill(&mut buf).unwrap().unwrap();
        // Kill the ffmpeg this source started (by its pid): what is left in the pipe (less
        // than a frame) is a short frame or EOF, and the exit status is a failure.
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(s.child.id() as i32), nix::sys::signal::Signal::SIGKILL)
            .unwrap();
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
    fn video_source_drop_reaps_ffmpeg() {
        let mut s = VideoSource::open(&clip(), None, None).unwrap();
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

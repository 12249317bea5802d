//! `--source`, `--fps`, `--frames`, `--buffers`, the V4L2 options and the network-camera
//! options, and their checked form, [`zcpipe_capture::CaptureConfig`].

use anyhow::Result;
use clap::Args;

use zcpipe_capture::decoder::DecoderChoice;
use zcpipe_capture::encode::EncoderChoice;
use zcpipe_capture::network::{is_rtsp, RtspTransport};
use zcpipe_capture::spec::{check_fps, check_v4l2_only_flags, fps_name, parse_fps, SourceSpec, FPS_MAX};
use zcpipe_capture::v4l2::{parse_format, parse_size, CaptureIo};
use zcpipe_capture::CaptureConfig;
use zcpipe_core::config::Choice;

use super::common::{check_buffers, choice};

/// Capture options.
#[derive(Args, Debug, Clone)]
pub struct CaptureArgs {
    /// auto (the first V4L2 capture node, else the bundled clip), v4l2[:DEVICE], image:PATH (file or directory, looped), video:PATH (via ffmpeg), testsrc[:WxH[@FPS]], or a stream URL (rtsp://, rtsps://, http(s)://, ...: a live network camera via ffmpeg, reconnected when it drops).
    #[arg(long, default_value = "auto")]
    pub source: String,
    /// Frames per second: a host source is paced at it; a V4L2 camera is asked for it (VIDIOC_S_PARM). `max`: a host source unpaced, as fast as the pipeline takes frames (a test pattern is rendered once per buffer, then reused). Default: the source's own rate.
    #[arg(long, value_parser = parse_fps, allow_negative_numbers = true)]
    pub fps: Option<f64>,
    /// Stop after this many frames (at least 1).
    #[arg(long, value_parser = parse_frames, allow_negative_numbers = true)]
    pub frames: Option<u64>,
    /// Buffers in the capture pool.
    #[arg(long, default_value_t = 4)]
    pub buffers: usize,
    /// V4L2 pixel format: NV12, NV16, NV12M, YUYV, RGB24, BGR24 or XR24 (default: the first of those the camera offers; XR24 is what a display scans out without a copy), or MJPG (a UVC webcam's Motion JPEG, decoded by MPP on a board or on the CPU).
    #[arg(long)]
    pub format: Option<String>,
    /// V4L2 frame size, WxH (default: the camera's current size). For a network stream: the largest frame the pool holds (default: the stream's size at start-up); a larger stream is scaled down to it (with --decoder mpp: re-opened at its new size). For a video: file with --decoder mpp: the largest picture the pool holds.
    #[arg(long)]
    pub size: Option<String>,
    /// V4L2 buffers: mmap (the driver's, exported with VIDIOC_EXPBUF) or dmabuf (from --heap, imported). Default mmap.
    #[arg(long, value_parser = choice::<CaptureIo>())]
    pub capture_io: Option<CaptureIo>,
    /// This capture stage is one camera of several: it listens at `capture@NAME.sock` and
    /// reports as `capture@NAME` (the scale stage's `--cameras` lists it). `zcpipe run` sets
    /// it when given several sources; the systemd template `zcpipe-capture@NAME` too.
    #[arg(long, hide_short_help = true)]
    pub camera: Option<String>,
    /// RTSP transport for an rtsp:// or rtsps:// source: tcp (default) or udp.
    #[arg(long, value_parser = choice::<RtspTransport>())]
    pub rtsp_transport: Option<RtspTransport>,
    /// A network camera that cannot be reached at start-up is waited for (retried with back-off, 1 s doubling to 30 s) instead of failing the run.
    #[arg(long)]
    pub wait_for_camera: bool,
    /// Who decodes a compressed source (a video: file, a network stream, an MJPEG camera): mpp (Rockchip's hardware decoder, into the pool's dma-bufs without a copy), cpu (ffmpeg, or a JPEG crate for MJPEG cameras), or auto (mpp when librockchip_mpp loads and /dev/mpp_service exists; the default).
    #[arg(long, value_parser = choice::<DecoderChoice>())]
    pub decoder: Option<DecoderChoice>,
    /// Who encodes a recorded raw camera's frames (a V4L2 camera, a test pattern, an image,
    /// MJPEG) for --record-dir: mpp (Rockchip's hardware encoder, reading the pool's dma-buf
    /// in place), cpu (ffmpeg's libx264), or auto (mpp when librockchip_mpp loads and
    /// /dev/mpp_service exists; the default).
    #[arg(long, value_parser = choice::<EncoderChoice>())]
    pub encoder: Option<EncoderChoice>,
}

/// `--frames`: a whole number of at least 1.
fn parse_frames(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("use a whole number of at least 1 (leave --frames out to run until the source ends or Ctrl-C)".into()),
    }
}

impl CaptureArgs {
    /// The checked configuration: the source parses, `--fps` is in range, the V4L2-only
    /// options come with a V4L2 source and parse (`--format` a format zcpipe reads,
    /// `--size` as `WxH`), the pool has 2..=64 buffers.
    pub fn config(&self) -> Result<CaptureConfig> {
        let source: SourceSpec = self.source.parse()?;
        if let Some(f) = self.fps {
            check_fps(f)?;
            if f == FPS_MAX && matches!(source, SourceSpec::V4l2(_)) {
                anyhow::bail!("--fps max is for host sources (testsrc, image:, video:); a V4L2 camera paces itself: pass a number");
            }
            if f == FPS_MAX && source.is_network() {
                anyhow::bail!("--fps max is for host sources (testsrc, image:, video:); the network stream {} sends at its own rate: pass a number (ffmpeg converts the rate) or leave --fps out", source.redacted());
            }
        }
        match &source {
            SourceSpec::Network(url) if self.rtsp_transport.is_some() && !is_rtsp(url) => {
                anyhow::bail!(
                    "--rtsp-transport applies to rtsp:// and rtsps:// sources; {} is not RTSP",
                    source.redacted()
                )
            }
            SourceSpec::Network(_) => {}
            _ if self.rtsp_transport.is_some() || self.wait_for_camera => {
                let flag = if self.rtsp_transport.is_some() { "--rtsp-transport" } else { "--wait-for-camera" };
                anyhow::bail!(
                    "{flag} applies to network cameras only (--source rtsp://...); source {} is not one",
                    source.redacted()
                )
            }
            _ => {}
        }
        // `--size` sizes the pool of a file decoded by MPP too (pictures that grow mid-stream).
        let size_for_mpp = matches!(source, SourceSpec::Video(_)) && self.decoder == Some(DecoderChoice::Mpp);
        check_v4l2_only_flags(
            &source,
            self.format.is_some(),
            self.size.is_some() && !size_for_mpp,
            self.capture_io.is_some(),
        )?;
        if self.decoder.is_some_and(|d| d != DecoderChoice::Auto)
            && matches!(source, SourceSpec::Image(_) | SourceSpec::TestSrc { .. })
        {
            anyhow::bail!("--decoder applies to compressed sources (video:PATH, a network stream, an MJPEG camera); source {} is not one: leave --decoder out", source.redacted());
        }
        if self.decoder == Some(DecoderChoice::Mpp) && self.fps == Some(FPS_MAX) {
            anyhow::bail!("--fps max with --decoder mpp: a decoded stream is paced at its own rate (or --fps N); pass a number or leave --fps out");
        }
        if let Some(name) = &self.camera {
            zcpipe_core::config::check_camera_name(name).map_err(|e| anyhow::anyhow!("--camera: {e:#}"))?;
        }
        Ok(CaptureConfig {
            source,
            fps: self.fps,
            frames: self.frames,
            buffers: check_buffers("--buffers", self.buffers, 4)?,
            format: self.format.as_deref().map(parse_format).transpose()?,
            size: self.size.as_deref().map(parse_size).transpose()?,
            capture_io: self.capture_io,
            rtsp_transport: self.rtsp_transport,
            wait_for_camera: self.wait_for_camera,
            decoder: self.decoder,
            record: false,
            encoder: self.encoder.unwrap_or_default(),
            record_camera: None,
        })
    }

    /// These options as `--key=value` flags for `zcpipe stage capture` or `zcpipe run`
    /// (`=`: a value starting with '-' must not look like a flag); unset ones are left out.
    pub fn flags(&self) -> Vec<String> {
        let mut v = vec![format!("--source={}", self.source)];
        v.extend(self.fps.map(|f| format!("--fps={}", fps_name(f))));
        v.extend(self.frames.map(|n| format!("--frames={n}")));
        v.push(format!("--buffers={}", self.buffers));
        v.extend(self.format.as_ref().map(|f| format!("--format={f}")));
        v.extend(self.size.as_ref().map(|s| format!("--size={s}")));
        v.extend(self.capture_io.map(|io| format!("--capture-io={}", io.name())));
        v.extend(self.camera.as_ref().map(|c| format!("--camera={c}")));
        v.extend(self.rtsp_transport.map(|t| format!("--rtsp-transport={}", t.name())));
        v.extend(self.wait_for_camera.then(|| "--wait-for-camera".to_string()));
        v.extend(self.decoder.map(|d| format!("--decoder={}", d.name())));
        v.extend(self.encoder.map(|e| format!("--encoder={}", e.name())));
        v
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::super::{Cli, Command};
    use zcpipe_capture::network::RtspTransport;
    use zcpipe_capture::spec::SourceSpec;

    fn run_args(args: &[&str]) -> super::CaptureArgs {
        let Command::Run(r) = Cli::parse_from(["zcpipe", "run"].iter().chain(args)).cmd else { panic!("not run") };
        r.pipeline.capture
    }

    /// The network-camera options reach the capture stage's command line and parse back
    /// there to the same configuration (the URL whole: it is an argument, not a message).
    #[test]
    fn network_options_reach_the_capture_stage() {
        let url = "rtsp://user:p%40ss@10.0.0.7:554/stream1";
        let a = run_args(&[
            "--source",
            url,
            "--rtsp-transport",
            "udp",
            "--wait-for-camera",
            "--size",
            "1280x720",
            "--fps",
            "5",
        ]);
        let cfg = a.config().unwrap();
        assert_eq!(cfg.source, SourceSpec::Network(url.into()));
        assert_eq!(
            (cfg.rtsp_transport, cfg.wait_for_camera, cfg.size),
            (Some(RtspTransport::Udp), true, Some((1280, 720)))
        );
        let flags = a.flags();
        for f in [&format!("--source={url}"), "--rtsp-transport=udp", "--wait-for-camera", "--size=1280x720"] {
            assert!(flags.iter().any(|g| g == f), "{f} is not passed on: {flags:?}");
        }
        let back: Vec<&str> = flags.iter().map(String::as_str).collect();
        assert_eq!(run_args(&back).config().unwrap(), cfg);
        // Left out when not given.
        let plain = run_args(&["--source", url]).flags();
        assert!(!plain.iter().any(|f| f.starts_with("--rtsp-transport") || f == "--wait-for-camera"), "{plain:?}");
    }

    /// The network-only flags are refused for other sources, and V4L2-only ones for a
    /// network source; each error one line, the URL redacted.
    #[test]
    fn network_flags_are_checked_against_the_source() {
        let err = |args: &[&str]| run_args(args).config().unwrap_err().to_string();
        assert!(err(&["--source", "testsrc", "--wait-for-camera"])
            .contains("--wait-for-camera applies to network cameras only"));
        assert!(err(&["--source", "video:a.mp4", "--rtsp-transport", "tcp"])
            .contains("--rtsp-transport applies to network cameras only"));
        let e = err(&["--source", "https://u:pw@h/x.m3u8", "--rtsp-transport", "tcp"]);
        assert!(
            e.contains("rtsp:// and rtsps://") && e.contains("https://u:***@h/x.m3u8") && !e.contains("pw@"),
            "{e}"
        );
        let e = err(&["--source", "rtsp://u:pw@h/x", "--format", "NV12"]);
        assert!(e.contains("--format applies to V4L2 cameras only") && !e.contains("pw@"), "{e}");
        let e = err(&["--source", "rtsp://u:pw@h/x", "--fps", "max"]);
        assert!(e.contains("--fps max") && !e.contains("pw@"), "{e}");
        assert!(run_args(&["--source", "rtsp://h/x", "--wait-for-camera", "--rtsp-transport", "tcp"]).config().is_ok());
    }
}

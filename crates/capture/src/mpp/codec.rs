//! What MPP takes: the codec probe of an input, its pictures' format, and their layout.

use super::*;

/// MPP's pictures must be 8-bit NV12 (`MPP_FMT_YUV420SP`, no frame buffer compression).
pub(super) fn check_format(i: &FrameInfo, shown: &str) -> Result<()> {
    let fmt = i.fmt & mpp::MPP_FRAME_FMT_MASK;
    if fmt != mpp::MPP_FMT_YUV420SP || i.fmt & mpp::MPP_FRAME_FBC_MASK != 0 {
        bail!("{shown}: MPP decodes this stream to format {:#x}, not 8-bit NV12 (a 10-bit or 4:2:2 stream, or compressed frame buffers); pass --decoder cpu", i.fmt);
    }
    if i.width == 0
        || i.height == 0
        || i.hor_stride < i.width
        || i.ver_stride < i.height
        || i.width > 16384
        || i.height > 16384
    {
        bail!(
            "{shown}: MPP reported an impossible picture {}x{} (hor_stride {}, ver_stride {})",
            i.width,
            i.height,
            i.hor_stride,
            i.ver_stride
        );
    }
    Ok(())
}

/// The NV12 layout of an MPP picture: `bytesperline` = `hor_stride`, the CbCr plane at
/// `hor_stride * ver_stride` with `ver_stride / 2` rows.
pub(crate) fn layout_of(i: &FrameInfo) -> FrameLayout {
    let (hor, ver) = (i.hor_stride, i.ver_stride);
    let mut planes = [PlaneDesc::default(); MAX_PLANES];
    planes[0] = PlaneDesc { offset: 0, bytesperline: hor, length: hor * ver, fd_index: 0 };
    planes[1] = PlaneDesc { offset: hor * ver, bytesperline: hor, length: hor * ver / 2, fd_index: 0 };
    FrameLayout { fourcc: Fourcc::NV12, width: i.width, height: i.height, num_planes: 2, planes }
}

/// Runs ffprobe on the input ([`PROBE_ARGS`] with the input options of a network stream),
/// waiting at most [`IO_TIMEOUT`] + [`STALL_GRACE`] (or until `stop`): size, rate and codec.
pub(super) fn probe(
    input: &MppInput,
    transport: RtspTransport,
    shown: &str,
    stop: &AtomicBool,
) -> Result<(VideoProbe, CodecProbe)> {
    let mut args: Vec<String> = PROBE_ARGS.iter().map(|s| s.to_string()).collect();
    let (url, list) = match input {
        MppInput::File(p) => {
            args.push(p.display().to_string());
            ("", None)
        }
        MppInput::Network(u) => {
            let input = net_input(u, transport);
            args.extend(input.args);
            (u.as_str(), Some(input.list))
        }
    };
    let mut child = Child::spawn_fed("ffprobe", &args, list.as_deref().map(str::as_bytes))?;
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().context("waiting for ffprobe")? {
            break st;
        }
        if stop.load(Ordering::Relaxed) {
            bail!("{shown}: stopped while probing");
        }
        if t.elapsed() > IO_TIMEOUT + STALL_GRACE {
            bail!("cannot open {shown}: ffprobe gave no answer within {} s; check the URL and that the camera is reachable", (IO_TIMEOUT + STALL_GRACE).as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.read_stdout();
    if !status.success() {
        bail!(
            "cannot open {shown}: ffprobe failed ({status}): {}; check the path or URL",
            scrub_secrets(&child.stderr_tail(), url)
        );
    }
    let p = parse_probe(&out).map_err(|why| anyhow!("cannot open {shown}: {}", scrub_secrets(&why, url)))?;
    let codec = parse_codec(&out).unwrap_or_else(|| CodecProbe { codec: "an unnamed codec".into(), pix_fmt: None });
    Ok((p, codec))
}

/// Whether MPP decodes `c` into something zcpipe takes: H.264, H.265 (this module) or MJPEG
/// ([`super::super::mjpeg`]), 8-bit 4:2:0 (`yuv420p`, `yuvj420p`, `nv12`, or not said). `Err`: why
/// not, one clause (a 10-bit stream MPP would decode to `YUV420SP_10BIT`, a 4:2:2 or 4:4:4
/// one, another codec).
pub(crate) fn mpp_takes(c: &CodecProbe) -> std::result::Result<(), String> {
    if !matches!(c.codec.as_str(), "h264" | "hevc" | "mjpeg") {
        return Err(format!("its video is {}, which MPP does not decode here", c.codec));
    }
    match c.pix_fmt.as_deref() {
        None | Some("yuv420p" | "yuvj420p" | "nv12") => Ok(()),
        // MJPEG of other samplings is the JPEG path's business (it checks each JPEG).
        Some(_) if c.codec == "mjpeg" => Ok(()),
        Some(f) => Err(format!(
            "its video is {} {f}, which MPP decodes to other than 8-bit NV12 (a 10-bit, 4:2:2 or 4:4:4 stream)",
            c.codec
        )),
    }
}

/// The codec and pixel format of `path`'s first video stream, by ffprobe; `None` when it
/// cannot tell (the caller's path reports why).
pub(crate) fn file_codec(path: &Path) -> Option<CodecProbe> {
    let out = std::process::Command::new("ffprobe")
        .args(PROBE_ARGS)
        .arg(path)
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| parse_codec(&out.stdout)).flatten()
}

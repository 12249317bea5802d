//! `--decoder auto|mpp|cpu`: who decodes a compressed source (an H.264/H.265 file or network
//! stream, an MJPEG camera or file).
//!
//! - `mpp`: Rockchip's hardware decoder through librockchip_mpp ([`zcpipe_sys::mpp`]),
//!   loaded at run time. Its frames land in the capture pool's own dma-bufs (an external
//!   buffer group) and go downstream without a CPU copy.
//! - `cpu`: ffmpeg decodes on the CPU into packed NV12 on a pipe (a JPEG crate for MJPEG
//!   camera frames), copied into the pool.
//! - `auto` (the default): `mpp` when librockchip_mpp loads and `/dev/mpp_service` (the BSP
//!   kernel's `rk_vcodec` node) exists, else `cpu`. An explicit `mpp` does not look at the
//!   node: the library itself reports a missing or closed service.
//!
//! Contract for `auto`'s node check: Rockchip BSP kernels (`drivers/video/rockchip/mpp`)
//! create `/dev/mpp_service`; mainline kernels have no such node (they decode through V4L2
//! stateless drivers, which MPP does not use).

use std::path::Path;
use std::sync::Arc;

use super::spec::SourceSpec;
use zcpipe_core::config::Choice;
use zcpipe_sys::board;
use zcpipe_sys::mpp::Libmpp;

/// `--decoder`: who decodes a compressed source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DecoderChoice {
    /// MPP when its library loads and `/dev/mpp_service` exists, else the CPU.
    #[default]
    Auto,
    /// Rockchip MPP (hardware); fails in one line if librockchip_mpp does not load.
    Mpp,
    /// ffmpeg (or a JPEG crate) on the CPU.
    Cpu,
}

impl Choice for DecoderChoice {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (DecoderChoice::Auto, "auto", "MPP when librockchip_mpp loads and /dev/mpp_service exists, else the CPU"),
        (
            DecoderChoice::Mpp,
            "mpp",
            "Rockchip MPP: the hardware decoder writes into the capture pool's dma-bufs, no CPU copy",
        ),
        (DecoderChoice::Cpu, "cpu", "ffmpeg (or a JPEG crate for MJPEG cameras) on the CPU, copied into the pool"),
    ];
}

/// The MPP service node `auto` looks for.
pub(crate) const MPP_SERVICE: &str = "/dev/mpp_service";

/// The decoder settled on.
#[derive(Clone, Debug)]
pub enum Decoder {
    /// MPP, on this loaded library.
    Mpp(Arc<Libmpp>),
    /// The CPU.
    Cpu,
}

impl Decoder {
    /// `mpp` or `cpu`.
    pub fn name(&self) -> &'static str {
        match self {
            Decoder::Mpp(_) => "mpp",
            Decoder::Cpu => "cpu",
        }
    }
}

/// Resolves `choice` into a decoder and the reason (one line, for the plan and the log).
/// `library` overrides the library search (`$ZCPIPE_LIBMPP`, then the sonames). Errors:
/// `mpp` asked for and librockchip_mpp does not load (the message names the fix).
pub fn resolve(choice: DecoderChoice, library: Option<&Path>) -> anyhow::Result<(Decoder, String)> {
    match choice {
        DecoderChoice::Cpu => Ok((Decoder::Cpu, "--decoder cpu".into())),
        DecoderChoice::Mpp => {
            let lib = Libmpp::open(library).map_err(|e| anyhow::anyhow!("--decoder mpp: {e:#}"))?;
            let why = format!("--decoder mpp: {} loads", lib.path());
            Ok((Decoder::Mpp(Arc::new(lib)), why))
        }
        DecoderChoice::Auto => {
            let node = board::path(MPP_SERVICE);
            if !node.exists() {
                return Ok((
                    Decoder::Cpu,
                    format!("auto: no {MPP_SERVICE} (not a Rockchip BSP kernel): ffmpeg on the CPU"),
                ));
            }
            match Libmpp::open(library) {
                Ok(lib) => {
                    let why = format!("auto: {} loads and {MPP_SERVICE} exists", lib.path());
                    Ok((Decoder::Mpp(Arc::new(lib)), why))
                }
                Err(e) => Ok((
                    Decoder::Cpu,
                    format!("auto: {MPP_SERVICE} exists but librockchip_mpp does not load ({e:#}): ffmpeg on the CPU"),
                )),
            }
        }
    }
}

/// The decoder a source gets: [`resolve`], then, for `auto`, back to the CPU where MPP
/// cannot take the source after all. Sources that are not compressed streams (images, test
/// patterns, cameras: their own paths) get [`Decoder::Cpu`] and an empty reason. Under
/// `auto` the CPU decodes a `video:` file MPP does not take ([`super::mpp::mpp_takes`], by
/// ffprobe: a codec other than H.264, H.265 or MJPEG, or a 10-bit, 4:2:2 or 4:4:4 stream), and
/// a network camera started with `--wait-for-camera` (MPP sizes the pool from the stream's
/// first pictures, which a camera not there yet cannot give). Errors: [`resolve`]'s, and
/// `--decoder mpp` with `--wait-for-camera` (one line naming the fix).
pub fn settle(
    choice: DecoderChoice,
    spec: &SourceSpec,
    wait_for_camera: bool,
    library: Option<&Path>,
) -> anyhow::Result<(Decoder, String)> {
    if !matches!(spec, SourceSpec::Video(_) | SourceSpec::Network(_)) {
        return Ok((Decoder::Cpu, String::new()));
    }
    if wait_for_camera && choice == DecoderChoice::Mpp {
        anyhow::bail!("--wait-for-camera with --decoder mpp: MPP sizes the capture pool from the stream's first pictures, so the camera must answer at start-up; leave --wait-for-camera out (a stream that drops later is re-opened), or pass --decoder cpu");
    }
    let (decoder, why) = resolve(choice, library)?;
    if let (Decoder::Mpp(_), DecoderChoice::Auto) = (&decoder, choice) {
        if wait_for_camera {
            return Ok((Decoder::Cpu, format!("{why}, but --wait-for-camera: the pool cannot be sized from a camera not there yet, so ffmpeg on the CPU")));
        }
        if let SourceSpec::Video(path) = spec {
            if let Some(Err(not)) = super::mpp::file_codec(path).map(|c| super::mpp::mpp_takes(&c)) {
                return Ok((Decoder::Cpu, format!("{why}, but {}: {not}: ffmpeg on the CPU", path.display())));
            }
        }
    }
    Ok((decoder, why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse_and_cpu_needs_nothing() {
        assert_eq!(DecoderChoice::from_name("mpp"), Some(DecoderChoice::Mpp));
        assert_eq!(DecoderChoice::default().name(), "auto");
        let (d, why) = resolve(DecoderChoice::Cpu, None).unwrap();
        assert_eq!((d.name(), why.as_str()), ("cpu", "--decoder cpu"));
    }

    #[test]
    fn mpp_without_the_library_is_one_line_naming_the_fix() {
        let e =
            resolve(DecoderChoice::Mpp, Some(Path::new("/nonexistent/librockchip_mpp.so"))).unwrap_err().to_string();
        assert!(
            e.starts_with("--decoder mpp: cannot load librockchip_mpp")
                && e.contains("/nonexistent/librockchip_mpp.so"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }
}

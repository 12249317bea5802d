//! `--scaler auto` and `--rga-core auto`: the best scaler this board has, and why.
//!
//! In order: RGA through librga when the library loads and `/dev/rga` opens for reading and
//! writing (the vendor kernel's RGA driver); else a V4L2 mem2mem node whose driver is
//! `rockchip-rga` (mainline Linux's RGA driver, drivers/media/platform/rockchip/rga); else
//! the CPU. Other mem2mem drivers (vim2m, codecs) are not scalers zcpipe picks by itself:
//! `--scaler v4l2m2m:/dev/videoN` names one. The scale stage and `zcpipe run`'s plan both
//! call [`choose`], so a stage started alone (systemd) decides as the plan said.

use std::fs::OpenOptions;

use zcpipe_sys::board;
use zcpipe_sys::rga::Librga;
use zcpipe_sys::v4l2::node::m2m_nodes;

use super::rga::RgaCore;
use super::ScalerKind;

/// The mainline RGA driver's name in `VIDIOC_QUERYCAP` (`driver`).
pub(crate) const MAINLINE_RGA_DRIVER: &str = "rockchip-rga";

/// What [`choose`] picked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalerChoice {
    /// The backend (never `Auto`).
    pub kind: ScalerKind,
    /// With RGA: the core (never `Auto`).
    pub rga_core: RgaCore,
    /// One line: why this backend (and, for `auto`, why not the better ones).
    pub reason: String,
    /// Whether RGA2 may do the work (RGA with a core that is not RGA3, or mainline
    /// rockchip-rga, whose hardware is RGA2): RGA2 reaches only the first 4 GiB.
    pub rga2: bool,
}

/// Resolves `--scaler` and `--rga-core` on this board: an explicit backend is kept (its
/// core resolved with [`RgaCore::resolve`]); `auto` probes RGA, then mainline rockchip-rga,
/// then takes the CPU. What cannot be used is named in `reason`; the one error is an RGA3
/// core asked for on a SoC without one ([`RgaCore::resolve`]).
pub fn choose(requested: &ScalerKind, rga_core: RgaCore) -> anyhow::Result<ScalerChoice> {
    let soc = board::socs().into_iter().next();
    let rga = |why: String| -> anyhow::Result<ScalerChoice> {
        let (core, core_why) = rga_core.resolve(soc.as_deref())?;
        Ok(ScalerChoice {
            kind: ScalerKind::Rga,
            rga_core: core,
            reason: format!("{why}; core {}: {core_why}", zcpipe_core::config::Choice::name(core)),
            rga2: !core.is_rga3(),
        })
    };
    match requested {
        ScalerKind::Auto => {}
        ScalerKind::Rga => return rga("--scaler rga".into()),
        ScalerKind::V4l2M2m(p) => {
            let mainline = m2m_nodes().iter().any(|n| &n.path == p && n.driver == MAINLINE_RGA_DRIVER);
            return Ok(ScalerChoice {
                kind: requested.clone(),
                rga_core,
                reason: format!("--scaler {requested}"),
                rga2: mainline,
            });
        }
        other => {
            return Ok(ScalerChoice { kind: other.clone(), rga_core, reason: format!("--scaler {other}"), rga2: false })
        }
    }
    let dev = board::path("/dev/rga");
    let no_rga = match Librga::open(None) {
        Ok(lib) => match OpenOptions::new().read(true).write(true).open(&dev) {
            Ok(_) => return rga(format!("auto: {} loads and {} opens", lib.path(), dev.display())),
            Err(e) => {
                let fix = match e.kind() {
                    std::io::ErrorKind::PermissionDenied => "install udev/99-zcpipe.rules and join the zcpipe group",
                    std::io::ErrorKind::NotFound => "load the RGA kernel driver",
                    _ => "check the RGA kernel driver",
                };
                let why = zcpipe_sys::errno_words(&e);
                format!("{} loads but {} does not open ({why}: {fix})", lib.path(), dev.display())
            }
        },
        Err(e) => {
            log::debug!("scaler auto: {e:#}");
            "librga does not load (`zcpipe doctor` says why)".to_string()
        }
    };
    let m2m = m2m_nodes();
    if let Some(n) = m2m.iter().find(|n| n.driver == MAINLINE_RGA_DRIVER) {
        return Ok(ScalerChoice {
            kind: ScalerKind::V4l2M2m(n.path.clone()),
            rga_core,
            reason: format!("auto: {no_rga}; {} is mainline Linux's RGA driver", n.label()),
            rga2: true,
        });
    }
    let others: Vec<String> = m2m.iter().map(|n| n.label()).collect();
    let others = if others.is_empty() { "none".to_string() } else { others.join(", ") };
    Ok(ScalerChoice {
        kind: ScalerKind::Cpu,
        rga_core,
        reason: format!(
            "auto: {no_rga}; no V4L2 mem2mem node of driver {MAINLINE_RGA_DRIVER} (mem2mem nodes: {others})"
        ),
        rga2: false,
    })
}

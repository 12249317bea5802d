//! `--rga-core`: the RGA core jobs are pinned to.

use zcpipe_sys::rga as sys;

/// `--rga-core`: which RGA core runs the jobs (`imconfig(IM_CONFIG_SCHEDULER_CORE, mask)`).
/// Pinning one core avoids the 2-4 px jitter of jobs hopping between cores (PITFALLS 15).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RgaCore {
    /// RGA3 core 0 on SoCs with RGA3 cores (RK3588), else the driver's pick ([`RgaCore::resolve`]).
    /// Unresolved (as [`RgaScaler::open`](super::RgaScaler::open) gets it from library users),
    /// it is the driver's pick.
    #[default]
    Auto,
    /// The driver's scheduler picks a core per job.
    Any,
    /// RK3588's first RGA3 core (`IM_SCHEDULER_RGA3_CORE0`): reaches all memory.
    Rga3Core0,
    /// RK3588's second RGA3 core (`IM_SCHEDULER_RGA3_CORE1`).
    Rga3Core1,
    /// The RGA2 core (`IM_SCHEDULER_RGA2_CORE0`; RK3588, RK3568, RK3566): first 4 GiB only.
    Rga2Core0,
    /// A second RGA2 core (`IM_SCHEDULER_RGA2_CORE1`).
    Rga2Core1,
}

impl zcpipe_core::config::Choice for RgaCore {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (RgaCore::Auto, "auto", "RGA3 core 0 where the SoC has RGA3 cores (RK3588), else the driver's pick"),
        (RgaCore::Any, "any", "The driver's scheduler picks a core per job (jobs may hop between cores)"),
        (RgaCore::Rga3Core0, "rga3-core0", "RK3588's first RGA3 core (`IM_SCHEDULER_RGA3_CORE0`): reaches all memory"),
        (RgaCore::Rga3Core1, "rga3-core1", "RK3588's second RGA3 core (`IM_SCHEDULER_RGA3_CORE1`)"),
        (
            RgaCore::Rga2Core0,
            "rga2-core0",
            "The RGA2 core (`IM_SCHEDULER_RGA2_CORE0`; RK3588, RK3568, RK3566): first 4 GiB only",
        ),
        (RgaCore::Rga2Core1, "rga2-core1", "A second RGA2 core (`IM_SCHEDULER_RGA2_CORE1`)"),
    ];
}

impl RgaCore {
    /// Whether this pins an RGA3 core (which reaches all memory).
    pub fn is_rga3(self) -> bool {
        matches!(self, RgaCore::Rga3Core0 | RgaCore::Rga3Core1)
    }

    /// What `auto` means on the SoC `soc` (as [`zcpipe_sys::board::socs`] names it), with the
    /// reason: RGA3 core 0 where the SoC has RGA3 cores (one pinned core: jobs hopping between
    /// cores jitter by 2-4 px, PITFALLS 15; and RGA3 reaches all memory), else the driver's
    /// pick. Any other value is kept.
    /// Error: an RGA3 core asked for on a SoC known to have none (RK3566, RK3568, RK3576).
    pub fn resolve(self, soc: Option<&str>) -> anyhow::Result<(RgaCore, String)> {
        let name = zcpipe_core::config::Choice::name(self);
        if self.is_rga3() {
            if let Some(s) = soc.filter(|s| zcpipe_sys::board::soc_info(s).is_some_and(|i| !i.rga3)) {
                anyhow::bail!("--rga-core {name}: {s} has no RGA3 core (only the RK3588 has them); use --rga-core auto, any, rga2-core0");
            }
        }
        if self != RgaCore::Auto {
            return Ok((self, format!("--rga-core {name}")));
        }
        Ok(match soc {
            Some(s) if zcpipe_sys::board::soc_info(s).is_some_and(|i| i.rga3) => {
                (RgaCore::Rga3Core0, format!("{s} has RGA3 cores: one pinned (jobs hopping between cores jitter by 2-4 px; RGA3 reaches all memory)"))
            }
            Some(s) => (RgaCore::Any, format!("{s} has no RGA3 core: the driver's pick")),
            None => (RgaCore::Any, "SoC unknown (no Rockchip device tree): the driver's pick".into()),
        })
    }

    /// The `IM_SCHEDULER_CORE` mask for `imconfig` (`im2d_type.h`), `None` for `Auto`.
    pub fn mask(self) -> Option<u64> {
        match self {
            RgaCore::Auto | RgaCore::Any => None,
            RgaCore::Rga3Core0 => Some(sys::IM_SCHEDULER_RGA3_CORE0),
            RgaCore::Rga3Core1 => Some(sys::IM_SCHEDULER_RGA3_CORE1),
            RgaCore::Rga2Core0 => Some(sys::IM_SCHEDULER_RGA2_CORE0),
            RgaCore::Rga2Core1 => Some(sys::IM_SCHEDULER_RGA2_CORE1),
        }
    }
}

//! `--rga-core`: the RGA core jobs are pinned to.

use crate::sys::rga as sys;

/// `--rga-core`: which RGA core runs the jobs (`imconfig(IM_CONFIG_SCHEDULER_CORE, mask)`).
/// Pinning one core avoids the 2-4 px jitter of jobs hopping between cores (PITFALLS 15).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RgaCore {
    /// The driver's scheduler picks a core per job.
    #[default]
    Auto,
    /// RK3588's first RGA3 core (`IM_SCHEDULER_RGA3_CORE0`): reaches all memory.
    Rga3Core0,
    /// RK3588's second RGA3 core (`IM_SCHEDULER_RGA3_CORE1`).
    Rga3Core1,
    /// The RGA2 core (`IM_SCHEDULER_RGA2_CORE0`; RK3588, RK3568, RK3566): first 4 GiB only.
    Rga2Core0,
    /// A second RGA2 core (`IM_SCHEDULER_RGA2_CORE1`).
    Rga2Core1,
}

impl crate::core::config::Choice for RgaCore {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (RgaCore::Auto, "auto", "The driver's scheduler picks a core per job"),
        (RgaCore::Rga3Core0, "rga3-core0", "RK3588's first RGA3 core (`IM_SCHEDULER_RGA3_CORE0`): reaches all memory"),
        (RgaCore::Rga3Core1, "rga3-core1", "RK3588's second RGA3 core (`IM_SCHEDULER_RGA3_CORE1`)"),
        (RgaCore::Rga2Core0, "rga2-core0", "The RGA2 core (`IM_SCHEDULER_RGA2_CORE0`; RK3588, RK3568, RK3566): first 4 GiB only"),
        (RgaCore::Rga2Core1, "rga2-core1", "A second RGA2 core (`IM_SCHEDULER_RGA2_CORE1`)"),
    ];
}

impl RgaCore {
    /// The `IM_SCHEDULER_CORE` mask for `imconfig` (`im2d_type.h`), `None` for `Auto`.
    pub fn mask(self) -> Option<u64> {
        match self {
            RgaCore::Auto => None,
            RgaCore::Rga3Core0 => Some(sys::IM_SCHEDULER_RGA3_CORE0),
            RgaCore::Rga3Core1 => Some(sys::IM_SCHEDULER_RGA3_CORE1),
            RgaCore::Rga2Core0 => Some(sys::IM_SCHEDULER_RGA2_CORE0),
            RgaCore::Rga2Core1 => Some(sys::IM_SCHEDULER_RGA2_CORE1),
        }
    }
}

//! `--npu-cores`: the core list, and one RKNN context per listed core.

use super::context::Ctx;
use super::RknnDetector;
use zcpipe_sys::rknn as sys;

/// Parses `--npu-cores` (`0,1,2`): distinct core numbers 0..=2.
pub fn parse_npu_cores(s: &str) -> Result<Vec<u32>, String> {
    let mut cores = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let c: u32 =
            part.parse().map_err(|_| format!("--npu-cores `{s}`: `{part}` is not a core number; use e.g. 0,1,2"))?;
        if c > 2 {
            return Err(format!("--npu-cores `{s}`: core {c} does not exist (RKNN has cores 0, 1, 2 at most)"));
        }
        if cores.contains(&c) {
            return Err(format!("--npu-cores `{s}`: core {c} is listed twice"));
        }
        cores.push(c);
    }
    if cores.is_empty() {
        return Err(format!("--npu-cores `{s}`: name at least one core, e.g. 0 or 0,1,2"));
    }
    Ok(cores)
}

impl RknnDetector {
    /// `per_core` contexts per listed core (none listed: `per_core` contexts the runtime
    /// places), the first the original and the others `rknn_dup_context`s of it (the weights
    /// loaded once); a refused duplicate or mask falls back to one context with the
    /// runtime's automatic choice.
    pub(super) fn setup_cores(&mut self, cores: &[u32], per_core: u32) {
        let per = per_core.max(1) as usize;
        // Core-major rounds (0,1,2,0,1,2): the first contexts cover every core.
        let plan: Vec<Option<u32>> = if cores.is_empty() {
            vec![None; per]
        } else {
            (0..per).flat_map(|_| cores.iter().map(|&c| Some(c))).collect()
        };
        if plan == [None] {
            return;
        }
        let rknn = self.rknn.clone();
        let main = self.ctxs[0].ctx;
        let mut failed = None;
        for (i, &core) in plan.iter().enumerate() {
            let ctx = if i == 0 {
                main
            } else {
                match rknn.dup_context(main) {
                    Ok(c) => {
                        self.ctxs.push(Ctx::new(c));
                        c
                    }
                    Err(e) => {
                        failed = Some(format!("{e} (context {} of {})", i + 1, plan.len()));
                        break;
                    }
                }
            };
            let Some(core) = core else { continue };
            let mask = 1u32 << core;
            match rknn.set_core_mask(ctx, mask) {
                Ok(()) => self.ctxs[i].mask = mask,
                Err(e) => {
                    failed = Some(format!("{e} (core {core}, mask {mask:#x})"));
                    break;
                }
            }
        }
        if let Some(why) = failed {
            log::warn!(
                "--npu-cores: {why}; running one context with the runtime's automatic core choice (RKNN_NPU_CORE_AUTO)"
            );
            for c in self.ctxs.drain(1..) {
                if let Err(e) = rknn.destroy(c.ctx) {
                    log::warn!("{e}");
                }
            }
            if self.ctxs[0].mask != sys::RKNN_NPU_CORE_AUTO {
                if let Err(e) = rknn.set_core_mask(main, sys::RKNN_NPU_CORE_AUTO) {
                    log::warn!("{e}");
                }
                self.ctxs[0].mask = sys::RKNN_NPU_CORE_AUTO;
            }
        } else if cores.is_empty() {
            log::info!(
                "RKNN: {} contexts sharing one model, placed by the runtime (RKNN_NPU_CORE_AUTO)",
                self.ctxs.len()
            );
        } else {
            log::info!(
                "RKNN: {} context(s) sharing one model, {per} on each of NPU core(s) {cores:?}; a free context takes the next frame the scheduler picks",
                self.ctxs.len()
            );
        }
    }
}

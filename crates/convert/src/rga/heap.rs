//! The heap an RGA-facing pool should come from: RGA2 reaches only the first 4 GiB.

use std::path::Path;

use zcpipe_core::dmabuf::{heap_names, list_heaps, HeapChoice};
use zcpipe_sys::board::{self, RamAbove4g};

/// The heap an RGA-facing pool should come from, and why (for the log).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RgaHeap {
    /// What to pass to [`zcpipe_core::dmabuf::Allocator::open`].
    pub choice: HeapChoice,
    /// One line saying why.
    pub reason: String,
}

/// Heaps preferred for RGA-facing pools, best first: RGA2 addresses only the first 4 GiB
/// ("RGA_MMU unsupported memory larger than 4G", PITFALLS 1-2), which a dma32 heap
/// guarantees and a CMA area on Rockchip boards sits within.
pub(crate) const RGA_HEAP_PREFERENCE: [HeapChoice; 2] = [HeapChoice::Dma32, HeapChoice::Cma];

/// Chooses the heap for a pool RGA reads or writes (the scale stage's output pool; capture's
/// pool with `--capture-io dmabuf`), given `--heap`, the heap directory (normally
/// `/dev/dma_heap` under the system root) and whether jobs are pinned to an RGA3 core.
/// RAM above 4 GiB is read from `/proc/iomem` ([`board::ram_above_4g`]).
pub fn rga_heap(requested: HeapChoice, heap_dir: &Path, rga3_pinned: bool) -> RgaHeap {
    rga_heap_with_ram(requested, heap_dir, board::ram_above_4g(), rga3_pinned)
}

/// [`rga_heap`] with the RAM fact given. `--heap auto`: an RGA3 core reaches all memory, and
/// a board whose RAM all sits below 4 GiB needs nothing special, so both keep the usual
/// order (`Auto`); otherwise (RGA2 may do the work and RAM lies above 4 GiB, or the RAM map
/// is unknown) the first present of [`RGA_HEAP_PREFERENCE`], else `Auto` with a warning in
/// `reason`. An explicit `--heap` is kept, with the same warning for heaps that may sit above
/// 4 GiB (system, udmabuf, and DRM dumb buffers: rockchipdrm backs them with shmem pages
/// mapped through the VOP's IOMMU, anywhere in RAM, or with CMA where the VOP has no IOMMU,
/// drivers/gpu/drm/rockchip/rockchip_drm_gem.c; which of the two a board does is not visible
/// from here) and a note that memfds cannot be imported at all.
pub(crate) fn rga_heap_with_ram(
    requested: HeapChoice,
    heap_dir: &Path,
    ram: Option<RamAbove4g>,
    rga3_pinned: bool,
) -> RgaHeap {
    let needs_low = !rga3_pinned && ram.as_ref().is_none_or(|r| r.above);
    let high = ram.as_ref().filter(|r| r.above && !rga3_pinned).map(|r| {
        format!(
            "; RAM lies above 4 GiB ({}), so RGA2 jobs may fail with \"RGA_MMU unsupported memory larger than 4G\": \
             enable a dma32 or CMA heap (CONFIG_DMABUF_HEAPS_CMA), or on an RK3588 pin an RGA3 core (--rga-core rga3-core0)",
            r.evidence
        )
    });
    let present = |c: HeapChoice| heap_names(c).iter().map(|n| heap_dir.join(n)).find(|p| p.exists());
    match requested {
        HeapChoice::Auto if rga3_pinned => {
            RgaHeap { choice: HeapChoice::Auto, reason: "an RGA3 core reaches all memory: the usual --heap auto order".into() }
        }
        HeapChoice::Auto if !needs_low => RgaHeap {
            choice: HeapChoice::Auto,
            reason: format!("all RAM is below 4 GiB ({}): the usual --heap auto order", ram.map(|r| r.evidence).unwrap_or_default()),
        },
        HeapChoice::Auto => {
            let why = match &ram {
                Some(r) => format!("RGA2 reaches only the first 4 GiB and RAM lies above ({})", r.evidence),
                None => "RGA2 reaches only the first 4 GiB and the RAM map is unknown".into(),
            };
            for c in RGA_HEAP_PREFERENCE {
                if let Some(p) = present(c) {
                    return RgaHeap { choice: c, reason: format!("{} for RGA-facing pools: {why}", p.display()) };
                }
            }
            let found = list_heaps(heap_dir);
            let found = if found.is_empty() { "none".to_string() } else { found.join(", ") };
            RgaHeap {
                choice: HeapChoice::Auto,
                reason: format!(
                    "no dma32 or cma heap in {} (heaps found: {found}); RGA-facing pool from the usual --heap auto order{}",
                    heap_dir.display(),
                    high.unwrap_or_default()
                ),
            }
        }
        HeapChoice::Dma32 | HeapChoice::Cma => {
            RgaHeap { choice: requested, reason: format!("--heap {}: below 4 GiB, as RGA2 needs", format!("{requested:?}").to_lowercase()) }
        }
        HeapChoice::Memfd => RgaHeap {
            choice: requested,
            reason: "--heap memfd: sealed memfds are not dma-bufs; the RGA driver cannot import them (only the test fake can)".into(),
        },
        HeapChoice::System | HeapChoice::Udmabuf | HeapChoice::Drm => RgaHeap {
            choice: requested,
            reason: format!("--heap {} as asked{}", format!("{requested:?}").to_lowercase(), high.unwrap_or_default()),
        },
    }
}

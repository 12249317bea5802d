//! The heap an RGA-facing pool should come from: RGA2 reaches only the first 4 GiB.

use std::path::Path;

use crate::core::dmabuf::{heap_names, list_heaps, HeapChoice};

/// The heap an RGA-facing pool should come from, and why (for the log).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RgaHeap {
    /// What to pass to [`crate::core::dmabuf::Allocator::open`].
    pub choice: HeapChoice,
    /// One line saying why.
    pub reason: String,
}

/// Heaps preferred for RGA-facing pools, best first: RGA2 addresses only the first 4 GiB
/// ("RGA_MMU unsupported memory larger than 4G", PITFALLS 1-2), which a dma32 heap
/// guarantees and a CMA area on Rockchip boards sits within.
pub const RGA_HEAP_PREFERENCE: [HeapChoice; 2] = [HeapChoice::Dma32, HeapChoice::Cma];

/// `MemTotal` from `/proc/meminfo`, bytes.
fn mem_total_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Chooses the heap for a pool RGA reads or writes (the scale stage's output pool; capture's
/// pool with `--capture-io dmabuf`), given `--heap` and the heap directory (normally
/// `/dev/dma_heap`). `--heap auto` takes the first present of [`RGA_HEAP_PREFERENCE`], else
/// stays `Auto` (the usual order) with a warning in `reason` when the board has more than
/// 4 GiB of RAM; an explicit `--heap` is kept, with the same warning for heaps that may sit
/// above 4 GiB and a note that memfds cannot be imported at all.
pub fn rga_heap(requested: HeapChoice, heap_dir: &Path) -> RgaHeap {
    let ram = mem_total_bytes();
    rga_heap_with_ram(requested, heap_dir, ram)
}

pub(super) fn rga_heap_with_ram(requested: HeapChoice, heap_dir: &Path, ram: Option<u64>) -> RgaHeap {
    const GIB: u64 = 1 << 30;
    let high = ram.filter(|&r| r > 4 * GIB).map(|r| {
        format!(
            "; this board has {:.1} GiB of RAM, so RGA2 jobs may fail with \"RGA_MMU unsupported memory larger than 4G\": \
             enable a dma32 or CMA heap (CONFIG_DMABUF_HEAPS_CMA) or pin an RGA3 core (--rga-core rga3-core0)",
            r as f64 / GIB as f64
        )
    });
    let present = |c: HeapChoice| heap_names(c).iter().map(|n| heap_dir.join(n)).find(|p| p.exists());
    match requested {
        HeapChoice::Auto => {
            for c in RGA_HEAP_PREFERENCE {
                if let Some(p) = present(c) {
                    return RgaHeap {
                        choice: c,
                        reason: format!("RGA-facing pool from {}: RGA2 reaches only the first 4 GiB (PITFALLS 1)", p.display()),
                    };
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
        HeapChoice::System | HeapChoice::Udmabuf => RgaHeap {
            choice: requested,
            reason: format!("--heap {} as asked{}", format!("{requested:?}").to_lowercase(), high.unwrap_or_default()),
        },
    }
}

//! What board this is, as the running kernel tells it: the system root every hardware file
//! is read under ([`path`]), the SoC from the device tree ([`socs`]), what each Rockchip SoC
//! has ([`SocInfo`]) and whether RAM sits above 4 GiB ([`ram_above_4g`]).
//!
//! **One root for every hardware file.** `/dev/video*`, `/dev/dma_heap`, `/dev/udmabuf`,
//! `/dev/rga`, `/proc/device-tree/*`, `/proc/iomem`, `/proc/meminfo` and the RKNPU driver's
//! version file are all read through [`path`], which puts them under `$ZCPIPE_TEST_ROOT`
//! when that is set. It is test-only: the tests lay out a fake RK3588 or RK3566 (a
//! `compatible` file, `/dev` nodes as plain files, heaps, an `iomem`) and check what
//! `zcpipe run --dry-run` and `zcpipe doctor` choose on it. Unset (always, in use), the root
//! is `/`.

use std::path::{Path, PathBuf};

/// Environment variable moving the system root (test-only; see the module doc).
pub(crate) const ROOT_ENV: &str = "ZCPIPE_TEST_ROOT";

/// The test system root, read from [`ROOT_ENV`] once, at the first use (start-up): `None`
/// (always, in use) for `/`.
fn test_root() -> Option<&'static Path> {
    static ROOT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| std::env::var_os(ROOT_ENV).filter(|r| !r.is_empty()).map(PathBuf::from)).as_deref()
}

/// `abs` (an absolute path such as `/proc/device-tree/compatible`) under the system root:
/// `abs` itself, or `$ZCPIPE_TEST_ROOT/proc/device-tree/compatible` when that was set at
/// start-up (it is read once, never again).
pub fn path(abs: impl AsRef<Path>) -> PathBuf {
    let abs = abs.as_ref();
    match test_root() {
        Some(root) => root.join(abs.strip_prefix("/").unwrap_or(abs)),
        None => abs.to_path_buf(),
    }
}

/// The device tree's root `compatible` property (`/proc/device-tree/compatible`).
pub const COMPATIBLE: &str = "/proc/device-tree/compatible";

/// The Rockchip SoCs a device-tree `compatible` property names (`rockchip,rk3588` ->
/// `rk3588`): NUL-separated strings, most specific first (Documentation/devicetree/
/// usage-model.rst), vendor `rockchip`, model starting `rk` or `rv` with no board suffix.
pub fn compatible_socs(compatible: &[u8]) -> Vec<String> {
    compatible
        .split(|&b| b == 0)
        .filter_map(|s| std::str::from_utf8(s).ok())
        .filter_map(|s| s.strip_prefix("rockchip,"))
        .filter(|m| (m.starts_with("rk") || m.starts_with("rv")) && m[2..].chars().all(|c| c.is_ascii_alphanumeric()))
        .map(|m| m.to_ascii_lowercase())
        .collect()
}

/// The Rockchip SoCs this board's device tree names (empty off Rockchip boards, and where
/// there is no device tree: x86 hosts, containers).
pub fn socs() -> Vec<String> {
    std::fs::read(path(COMPATIBLE)).map(|b| compatible_socs(&b)).unwrap_or_default()
}

/// What a Rockchip SoC has that zcpipe chooses by. Sources: Rockchip's datasheets and
/// RKNPU2's `rknn_set_core_mask` documentation (RK3588 three NPU cores, RK3576 two, the
/// others one); the RGA3 cores (`IM_SCHEDULER_RGA3_CORE0/1`, `im2d_type.h`) exist on the
/// RK3588 only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocInfo {
    /// NPU cores (`RKNN_NPU_CORE_0..2`).
    pub npu_cores: u32,
    /// Whether it has RGA3 cores, which reach all memory (RGA2 reaches the first 4 GiB).
    pub rga3: bool,
}

/// [`SocInfo`] of a SoC named as [`compatible_socs`] names it; `None` for SoCs zcpipe does
/// not know.
pub fn soc_info(soc: &str) -> Option<SocInfo> {
    Some(match soc {
        "rk3588" | "rk3588s" => SocInfo { npu_cores: 3, rga3: true },
        "rk3576" => SocInfo { npu_cores: 2, rga3: false },
        "rk3566" | "rk3568" | "rk3562" | "rv1103" | "rv1106" => SocInfo { npu_cores: 1, rga3: false },
        _ => return None,
    })
}

/// Whether any System RAM lies at or above 4 GiB, and what says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RamAbove4g {
    /// RAM above 4 GiB exists.
    pub above: bool,
    /// One line: the highest System RAM address in `/proc/iomem`, or `MemTotal` when iomem
    /// hides its addresses (it shows zeros to users without CAP_SYS_ADMIN).
    pub evidence: String,
}

/// The end (exclusive) of the highest top-level `System RAM` range of a `/proc/iomem` text
/// (`start-end : name`, hex, inclusive end); `None` when there is none or the addresses are
/// all zero (hidden from this reader).
pub(crate) fn iomem_ram_end(iomem: &str) -> Option<u64> {
    iomem
        .lines()
        .filter(|l| !l.starts_with(' ') && l.trim_end().ends_with(": System RAM"))
        .filter_map(|l| u64::from_str_radix(l.split(':').next()?.trim().split('-').nth(1)?, 16).ok())
        .max()
        .filter(|&end| end > 0)
        .map(|end| end + 1)
}

/// Reads `/proc/iomem` (`start-end : System RAM` lines, hex, top level) for RAM at or above
/// 4 GiB; where it gives no addresses (unprivileged readers see zeros), falls back to
/// `/proc/meminfo`'s `MemTotal` above 3.5 GiB (a board of 4 GiB or more maps some RAM above
/// 4 GiB). `None` when neither can be read.
pub fn ram_above_4g() -> Option<RamAbove4g> {
    const GIB4: u64 = 1 << 32;
    if let Some(top) = std::fs::read_to_string(path("/proc/iomem")).ok().and_then(|s| iomem_ram_end(&s)) {
        return Some(RamAbove4g { above: top > GIB4, evidence: format!("System RAM ends at {top:#x} (/proc/iomem)") });
    }
    let s = std::fs::read_to_string(path("/proc/meminfo")).ok()?;
    let kb: u64 = s.lines().find(|l| l.starts_with("MemTotal:"))?.split_whitespace().nth(1)?.parse().ok()?;
    let bytes = kb * 1024;
    // MemTotal is a size (less what firmware and the kernel reserve), not an address: a
    // 4 GiB board shows about 3.7 GiB and maps part of it above 4 GiB, past the I/O window
    // at 0xf0000000. Above 3.5 GiB, take it that some RAM lies above 4 GiB.
    let likely = bytes > GIB4 / 8 * 7;
    Some(RamAbove4g {
        above: likely,
        evidence: format!(
            "MemTotal {:.1} GiB in /proc/meminfo, so RAM {} lies above 4 GiB (/proc/iomem gives no addresses: it shows them to root only)",
            bytes as f64 / (1u64 << 30) as f64,
            if likely { "likely" } else { "hardly" }
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_move_under_the_test_root_only_when_set() {
        // The variable is process-wide: this test only reads the unset case, the
        // integration tests (tests/pipeline/plan.rs) set it in child processes.
        if test_root().is_none() {
            assert_eq!(path("/proc/iomem"), PathBuf::from("/proc/iomem"));
        }
    }

    #[test]
    fn socs_come_from_rockchip_compatible_strings() {
        assert_eq!(compatible_socs(b"radxa,rock-5b\0rockchip,rk3588\0"), vec!["rk3588"]);
        assert_eq!(compatible_socs(b"xunlong,orangepi-5\0rockchip,rk3588s\0"), vec!["rk3588s"]);
        assert!(compatible_socs(b"raspberrypi,5-model-b\0brcm,bcm2712\0").is_empty());
        assert_eq!(soc_info("rk3588").unwrap().npu_cores, 3);
        assert_eq!(soc_info("rk3576").unwrap(), SocInfo { npu_cores: 2, rga3: false });
        assert_eq!(soc_info("rk3566").unwrap(), SocInfo { npu_cores: 1, rga3: false });
        assert_eq!(soc_info("bcm2712"), None);
    }

    #[test]
    fn iomem_gives_the_top_of_system_ram() {
        // An 8 GiB RK3588 (RAM split around the 4 GiB hole), as root reads it.
        let rk3588 = "00200000-efffffff : System RAM\n  00210000-0197ffff : Kernel code\nf0000000-f0ffffff : f0000000.pcie\n100000000-3fbffffff : System RAM\n4f0000000-4ffffffff : System RAM\n";
        assert_eq!(iomem_ram_end(rk3588), Some(0x5_0000_0000));
        // A 4 GiB RK3566: everything below 4 GiB.
        assert_eq!(
            iomem_ram_end("00200000-083fffff : System RAM\n09400000-efffffff : System RAM\n"),
            Some(0xf000_0000)
        );
        // As an unprivileged user reads it: zeros.
        assert_eq!(iomem_ram_end("00000000-00000000 : System RAM\n00000000-00000000 : System RAM\n"), None);
        assert_eq!(iomem_ram_end(""), None);
    }
}

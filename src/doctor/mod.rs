//! `zcpipe doctor`: what this machine offers zcpipe, and a fix for every problem seen.
//!
//! Five sections, each read from the running kernel, never from a configuration file:
//!
//! - **V4L2 video nodes**: every `/dev/video*` ([`video_nodes`](zcpipe_sys::v4l2::node::video_nodes)), opened the way capture
//!   opens it (`O_RDWR | O_NONBLOCK`) and asked `VIDIOC_QUERYCAP` ([`probe_node`](zcpipe_sys::v4l2::node::probe_node)): driver,
//!   card, bus, device capabilities, the role zcpipe can give it (camera for `--source`,
//!   mem2mem for `--scaler`), and per queue every pixel format (`VIDIOC_ENUM_FMT`) with its
//!   frame sizes (`VIDIOC_ENUM_FRAMESIZES`) and, for the formats zcpipe reads, frame rates
//!   (`VIDIOC_ENUM_FRAMEINTERVALS`). A node that cannot be opened gets its owner, group and
//!   mode and the fix (`udev/99-zcpipe.rules`, group membership, the process holding it).
//! - **dma-buf heaps** (`/dev/dma_heap/*`, Documentation/userspace-api/dma-buf-heaps.rst):
//!   each heap's mode, whether this user can open it, which `--heap` choice uses it, and what
//!   `--heap auto` picks (the real [`Allocator::open`](zcpipe_core::dmabuf::Allocator::open)).
//! - **udmabuf** (`/dev/udmabuf`, include/uapi/linux/udmabuf.h): present, openable, and its
//!   `size_limit_mb` module parameter (the largest buffer it makes, MiB).
//! - **DRM** (`/dev/dri/card*`, include/uapi/drm/drm_mode.h): each card's driver, dumb
//!   buffers, atomic modesetting, connectors (state, modes, the preferred one), CRTCs, planes
//!   (type, CRTCs, formats) and writeback connectors; whether `--display` and `--heap drm`
//!   can work, and the fix when not.
//! - **vendor libraries**: whether `dlopen(3)` (through `libloading`) finds `librga.so`, `librknnrt.so` and
//!   `librockchip_mpp.so` (with each one's own version string), MPP's service node
//!   `/dev/mpp_service` (present, mode, opens read-write: a problem only on a Rockchip board), the SoC
//!   from the device tree (`/proc/device-tree/compatible`, NUL-separated strings, most
//!   specific first: Documentation/devicetree/usage-model.rst) and the RKNPU driver version
//!   (`/sys/kernel/debug/rknpu/version`, `/proc/debug/rknpu/version`). This is the extension
//!   point for the RGA/RKNN backends' own checks (library versions, NPU load).
//!
//! Output is text (one section per item; each problem is a `problem:` line followed by a
//! `fix:` line) or, with `--json`, one JSON object ([`Report`]). Doctor only looks: it
//! allocates nothing, streams nothing and changes no device setting. It exits 0 whatever it
//! finds (a problem is a finding, not a failure of doctor).
//!
//! Files: `report.rs` (the report's types, the `--json` schema), `access.rs` (owners, modes,
//! users and groups, and the fix for a refused open), `nodes.rs`, `heaps.rs` (heaps and
//! udmabuf), `drm.rs` (DRM cards and the `--display` / `--heap drm` verdicts), `vendor.rs` (vendor libraries, SoC, NPU driver), `text.rs` (the text form).
//! Doctor takes a plain [`DoctorOptions`]; the command line (`zcpipe doctor`) is in `cli`.

use std::io::{self, Write as _};
use std::path::PathBuf;

use anyhow::Result;

use zcpipe_sys::board;

mod access;
mod drm;
mod heaps;
mod nodes;
mod report;
mod text;
mod vendor;

pub use access::{rules_group, FileMode};
pub use nodes::{fmt_fps, Role};
pub use report::*;
pub use text::{sizes_text, text};
pub use vendor::{check_library, parse_compatible};

/// What `zcpipe doctor` is asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DoctorOptions {
    /// Print one JSON object ([`Report`]) instead of the text.
    pub json: bool,
}

/// The files doctor reads besides `/dev/video*` (which [`video_nodes`](zcpipe_sys::v4l2::node::video_nodes) lists): by
/// default under the system root ([`board::path`]: `/`, or a test's fake root); the unit
/// tests point them at a temporary directory.
#[derive(Clone, Debug)]
pub struct Paths {
    /// The dma-buf heap directory, `/dev/dma_heap` (dma-buf-heaps.rst).
    pub heap_dir: PathBuf,
    /// The udmabuf device, `/dev/udmabuf`.
    pub udmabuf: PathBuf,
    /// The DRM device directory, `/dev/dri` (its `card*` primary nodes).
    pub dri_dir: PathBuf,
    /// udmabuf's module parameters, `/sys/module/udmabuf/parameters` (`size_limit_mb`,
    /// drivers/dma-buf/udmabuf.c).
    pub udmabuf_params: PathBuf,
    /// The device tree's root `compatible`, `/proc/device-tree/compatible`.
    pub compatible: PathBuf,
    /// The device tree's root `model`, `/proc/device-tree/model`.
    pub model: PathBuf,
    /// Where Rockchip's RKNPU driver prints its version, in the order tried.
    pub npu_version: Vec<PathBuf>,
    /// The vendor libraries to `dlopen`: per library, the file names tried in order (the
    /// first is the library's name in the report).
    pub libraries: Vec<Vec<String>>,
    /// MPP's service node, `/dev/mpp_service` (Rockchip BSP kernels' `rk_vcodec` driver,
    /// through which librockchip_mpp reaches the video decoders).
    pub mpp_service: PathBuf,
}

impl Default for Paths {
    fn default() -> Paths {
        Paths {
            heap_dir: board::path("/dev/dma_heap"),
            udmabuf: board::path("/dev/udmabuf"),
            dri_dir: board::path("/dev/dri"),
            udmabuf_params: board::path("/sys/module/udmabuf/parameters"),
            compatible: board::path(board::COMPATIBLE),
            model: board::path("/proc/device-tree/model"),
            npu_version: vec![board::path("/sys/kernel/debug/rknpu/version"), board::path("/proc/debug/rknpu/version")],
            // $ZCPIPE_LIBRGA / $ZCPIPE_LIBRKNNRT first, then the names the backends try.
            libraries: vec![
                env_first(zcpipe_sys::rga::LIBRGA_ENV, &zcpipe_sys::rga::LIBRGA_NAMES),
                env_first(zcpipe_sys::rknn::LIBRKNNRT_ENV, &[zcpipe_sys::rknn::LIBRKNNRT_NAME]),
                env_first(zcpipe_sys::mpp::LIBMPP_ENV, &zcpipe_sys::mpp::LIBMPP_NAMES),
            ],
            mpp_service: board::path("/dev/mpp_service"),
        }
    }
}

/// `[$var, names...]` when the environment variable is set and non-empty, else `names`;
/// the report names the library after the last entry's stem (`librga.so`).
fn env_first(var: &str, names: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = std::env::var(var).ok().filter(|s| !s.is_empty()).into_iter().collect();
    v.extend(names.iter().map(|s| s.to_string()));
    v
}

/// Runs `f` with info logging off (doctor, and the plan's heap check): what the backends log while doctor looks (the heap it
/// chose, the librga version) is in the report already. Doctor is single-threaded, so
/// lowering the global level for the call hides only those lines.
pub(crate) fn quietly<T>(f: impl FnOnce() -> T) -> T {
    let level = log::max_level();
    log::set_max_level(level.min(log::LevelFilter::Warn));
    let r = f();
    log::set_max_level(level);
    r
}

/// Looks at everything; never fails (what cannot be read is reported as such).
pub fn gather(paths: &Paths) -> Report {
    let mut problems = vec![];
    let nodes = nodes::nodes_section(&mut problems);
    let (heaps, heap_choices, heap_auto) = heaps::heaps_section(paths, &mut problems);
    let drm = drm::drm_section(paths, &mut problems);
    let heap_usable = heaps.iter().any(|h| h.openable && h.choice.is_some()) || drm.heap_drm.can_work;
    let udmabuf = heaps::udmabuf_section(paths, heap_usable, &mut problems);
    let (libraries, soc, npu_driver) = vendor::vendor_section(paths, &mut problems);
    let mpp_service = vendor::mpp_service_section(paths, soc.is_rockchip(), &mut problems);
    Report {
        zcpipe: env!("CARGO_PKG_VERSION").into(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|e| format!("unknown ({e})")),
        user: access::user_report(),
        nodes,
        heap_dir: paths.heap_dir.display().to_string(),
        heaps,
        heap_choices,
        heap_auto,
        udmabuf,
        drm,
        libraries,
        soc,
        npu_driver,
        mpp_service,
        problems,
        plan: None,
        plan_error: None,
    }
}

/// Runs `zcpipe doctor`: prints the report (text, or JSON with `--json`) on stdout, ending
/// with `plan`: the plan `zcpipe run` with no flags would use (made by the caller, which
/// owns the command line's defaults), or why there is none.
/// Returns exit code 0 whatever it finds; only failing to write stdout is an error (a
/// closed pipe, as in `zcpipe doctor | head`, is not).
pub fn run(opts: DoctorOptions, plan: impl FnOnce() -> Result<crate::plan::Plan>) -> Result<i32> {
    let mut r = gather(&Paths::default());
    match quietly(plan) {
        Ok(p) => r.plan = Some(p),
        Err(e) => r.plan_error = Some(format!("{e:#}")),
    }
    let s = if opts.json { serde_json::to_string_pretty(&r)? + "\n" } else { text(&r) };
    match io::stdout().lock().write_all(s.as_bytes()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(0),
        r => r.map(|_| 0).map_err(|e| anyhow::anyhow!("writing the report to stdout: {e}")),
    }
}

#[cfg(test)]
mod tests;

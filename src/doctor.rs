//! `zcpipe doctor`: what this machine offers zcpipe, and a fix for every problem seen.
//!
//! Four sections, each read from the running kernel, never from a configuration file:
//!
//! - **V4L2 video nodes**: every `/dev/video*` ([`video_nodes`]), opened the way capture
//!   opens it (`O_RDWR | O_NONBLOCK`) and asked `VIDIOC_QUERYCAP` ([`probe_node`]): driver,
//!   card, bus, device capabilities, the role zcpipe can give it (camera for `--source`,
//!   mem2mem for `--scaler`), and per queue every pixel format (`VIDIOC_ENUM_FMT`) with its
//!   frame sizes (`VIDIOC_ENUM_FRAMESIZES`) and, for the formats zcpipe reads, frame rates
//!   (`VIDIOC_ENUM_FRAMEINTERVALS`). A node that cannot be opened gets its owner, group and
//!   mode and the fix (`udev/99-zcpipe.rules`, group membership, the process holding it).
//! - **dma-buf heaps** (`/dev/dma_heap/*`, Documentation/userspace-api/dma-buf-heaps.rst):
//!   each heap's mode, whether this user can open it, which `--heap` choice uses it, and what
//!   `--heap auto` picks (the real [`Allocator::open`]).
//! - **udmabuf** (`/dev/udmabuf`, include/uapi/linux/udmabuf.h): present, openable, and its
//!   `size_limit_mb` module parameter (the largest buffer it makes, MiB).
//! - **vendor libraries**: whether `dlopen(3)` finds `librga.so` and `librknnrt.so`, the SoC
//!   from the device tree (`/proc/device-tree/compatible`, NUL-separated strings, most
//!   specific first: Documentation/devicetree/usage-model.rst) and the RKNPU driver version
//!   (`/sys/kernel/debug/rknpu/version`, `/proc/debug/rknpu/version`). This is the extension
//!   point for the RGA/RKNN backends' own checks (library versions, NPU load).
//!
//! Output is text (one section per item; each problem is a `problem:` line followed by a
//! `fix:` line) or, with `--json`, one JSON object ([`Report`]). Doctor only looks: it
//! allocates nothing, streams nothing and changes no device setting. It exits 0 whatever it
//! finds (a problem is a finding, not a failure of doctor).

use std::ffi::{CStr, CString};
use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;

use crate::capture::v4l2::PREFERRED;
use crate::sys::v4l2::format_name;
use crate::sys::v4l2::node::{caps_names, open_node, probe_node, video_nodes, NodeInfo};
use crate::core::dmabuf::{heap_names, list_heaps, Allocator, HeapChoice};
use crate::core::frame::Fourcc;
use crate::sys::v4l2 as sys;

/// `zcpipe doctor`.
#[derive(clap::Args, Debug, Clone)]
pub struct DoctorArgs {
    /// Print one JSON object (nodes, heaps, udmabuf, libraries, soc, problems) instead of text.
    #[arg(long)]
    pub json: bool,
}

// ---------------------------------------------------------------------------------------------
// Where doctor looks
// ---------------------------------------------------------------------------------------------

/// The files doctor reads besides `/dev/video*` (which [`video_nodes`] lists); the unit
/// tests point them at a temporary directory.
#[derive(Clone, Debug)]
pub struct Paths {
    /// The dma-buf heap directory, `/dev/dma_heap` (dma-buf-heaps.rst).
    pub heap_dir: PathBuf,
    /// The udmabuf device, `/dev/udmabuf`.
    pub udmabuf: PathBuf,
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
}

impl Default for Paths {
    fn default() -> Paths {
        Paths {
            heap_dir: "/dev/dma_heap".into(),
            udmabuf: "/dev/udmabuf".into(),
            udmabuf_params: "/sys/module/udmabuf/parameters".into(),
            compatible: "/proc/device-tree/compatible".into(),
            model: "/proc/device-tree/model".into(),
            npu_version: vec!["/sys/kernel/debug/rknpu/version".into(), "/proc/debug/rknpu/version".into()],
            // $ZCPIPE_LIBRGA / $ZCPIPE_LIBRKNNRT first, then the names the backends try.
            libraries: vec![
                env_first(crate::sys::rga::LIBRGA_ENV, &crate::sys::rga::LIBRGA_NAMES),
                env_first(crate::sys::rknn::LIBRKNNRT_ENV, &[crate::sys::rknn::LIBRKNNRT_NAME]),
            ],
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

// ---------------------------------------------------------------------------------------------
// The report
// ---------------------------------------------------------------------------------------------

/// Everything doctor found (the `--json` object).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// zcpipe's version.
    pub zcpipe: String,
    /// The kernel release (`/proc/sys/kernel/osrelease`).
    pub kernel: String,
    /// Who ran doctor: what opens what depends on it.
    pub user: UserReport,
    /// Every `/dev/video*` node, in numeric order.
    pub nodes: Vec<NodeReport>,
    /// The heap directory looked at, `/dev/dma_heap`.
    pub heap_dir: String,
    /// Every entry of it, sorted by name.
    pub heaps: Vec<HeapReport>,
    /// Per explicit `--heap` heap choice (system, dma32, cma): the heap it would use.
    pub heap_choices: Vec<HeapChoiceReport>,
    /// What `--heap auto` picks here.
    pub heap_auto: AutoReport,
    /// `/dev/udmabuf`.
    pub udmabuf: UdmabufReport,
    /// The vendor libraries, `dlopen`ed by soname.
    pub libraries: Vec<LibraryReport>,
    /// The SoC, from the device tree.
    pub soc: SocReport,
    /// The RKNPU driver's version, if a version file was readable.
    pub npu_driver: NpuReport,
    /// Every problem found, each with its fix, in section order.
    pub problems: Vec<Problem>,
}

/// One problem and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// What is wrong, naming the thing.
    pub what: String,
    /// What to do about it.
    pub fix: String,
    /// The item it is about: a node or file path, a library name, or a section's path
    /// (`/dev/video*`, `/dev/dma_heap`).
    pub about: String,
}

/// The user doctor ran as.
#[derive(Clone, Debug, Serialize)]
pub struct UserReport {
    /// Real user id.
    pub uid: u32,
    /// User name from /etc/passwd, else the uid.
    pub name: String,
    /// The groups of this process (effective and supplementary), by name where known.
    pub groups: Vec<String>,
}

/// Owner, group and mode of a device file (stat(2)).
#[derive(Clone, Debug, Serialize)]
pub struct FileMode {
    /// Owner name (from /etc/passwd), else the uid as a number.
    pub owner: String,
    /// Group name (from /etc/group), else the gid as a number.
    pub group: String,
    /// Permission bits in octal, `0660`.
    pub mode: String,
    /// It is a character device (every node doctor checks should be).
    pub char_device: bool,
    #[serde(skip)]
    gid: u32,
    #[serde(skip)]
    bits: u32,
}

impl FileMode {
    fn of(path: &Path) -> Option<FileMode> {
        let m = std::fs::metadata(path).ok()?;
        Some(FileMode {
            owner: user_name(m.uid()),
            group: group_name(m.gid()),
            mode: format!("{:04o}", m.mode() & 0o7777),
            char_device: m.file_type().is_char_device(),
            gid: m.gid(),
            bits: m.mode() & 0o7777,
        })
    }

    /// `0660 root:video`.
    fn describe(&self) -> String {
        format!("{} {}:{}", self.mode, self.owner, self.group)
    }
}

/// What a V4L2 node is to zcpipe, from its device capabilities (`V4L2_CAP_*`,
/// Documentation/userspace-api/media/v4l/vidioc-querycap.rst).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Single-planar video capture (`V4L2_CAP_VIDEO_CAPTURE`): a camera for `--source`.
    Capture,
    /// Multi-planar video capture (`V4L2_CAP_VIDEO_CAPTURE_MPLANE`): a camera for `--source`.
    CaptureMplane,
    /// Single-planar memory-to-memory device (`V4L2_CAP_VIDEO_M2M`, or capture and output
    /// on one node): a scaler, converter or codec.
    Mem2mem,
    /// Multi-planar memory-to-memory device (`V4L2_CAP_VIDEO_M2M_MPLANE`).
    Mem2memMplane,
    /// Video output only (`V4L2_CAP_VIDEO_OUTPUT[_MPLANE]`): zcpipe does not use it.
    Output,
    /// Metadata capture or output (`V4L2_CAP_META_*`): zcpipe does not use it.
    Metadata,
    /// Anything else (VBI, SDR, touch, ...): zcpipe does not use it.
    Other,
    /// The node could not be opened or queried.
    Unknown,
}

/// `V4L2_CAP_META_CAPTURE` (include/uapi/linux/videodev2.h).
const V4L2_CAP_META_CAPTURE: u32 = 0x0080_0000;
/// `V4L2_CAP_META_OUTPUT` (include/uapi/linux/videodev2.h).
const V4L2_CAP_META_OUTPUT: u32 = 0x0800_0000;

impl Role {
    /// The role of a node with device capabilities `caps`. A node that sets both video
    /// capture and video output is a memory-to-memory device (older m2m drivers say so
    /// instead of `V4L2_CAP_VIDEO_M2M`).
    pub fn from_caps(caps: u32) -> Role {
        let cap_sp = caps & sys::V4L2_CAP_VIDEO_CAPTURE != 0;
        let cap_mp = caps & sys::V4L2_CAP_VIDEO_CAPTURE_MPLANE != 0;
        let out_sp = caps & sys::V4L2_CAP_VIDEO_OUTPUT != 0;
        let out_mp = caps & sys::V4L2_CAP_VIDEO_OUTPUT_MPLANE != 0;
        if caps & sys::V4L2_CAP_VIDEO_M2M_MPLANE != 0 || (cap_mp && out_mp) {
            Role::Mem2memMplane
        } else if caps & sys::V4L2_CAP_VIDEO_M2M != 0 || (cap_sp && out_sp) {
            Role::Mem2mem
        } else if cap_mp {
            Role::CaptureMplane
        } else if cap_sp {
            Role::Capture
        } else if out_sp || out_mp {
            Role::Output
        } else if caps & (V4L2_CAP_META_CAPTURE | V4L2_CAP_META_OUTPUT) != 0 {
            Role::Metadata
        } else {
            Role::Other
        }
    }

    /// The queues doctor lists, as `(name, enum v4l2_buf_type)`: a mem2mem device's OUTPUT
    /// queue (frames go in) then its CAPTURE queue (frames come out).
    pub fn queues(self) -> &'static [(&'static str, u32)] {
        match self {
            Role::Capture => &[("capture", sys::V4L2_BUF_TYPE_VIDEO_CAPTURE)],
            Role::CaptureMplane => &[("capture", sys::V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE)],
            Role::Mem2mem => &[("output", sys::V4L2_BUF_TYPE_VIDEO_OUTPUT), ("capture", sys::V4L2_BUF_TYPE_VIDEO_CAPTURE)],
            Role::Mem2memMplane => {
                &[("output", sys::V4L2_BUF_TYPE_VIDEO_OUTPUT_MPLANE), ("capture", sys::V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE)]
            }
            _ => &[],
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Role::Capture => "video capture, single-planar",
            Role::CaptureMplane => "video capture, multi-planar",
            Role::Mem2mem => "mem2mem (scaler, converter or codec), single-planar",
            Role::Mem2memMplane => "mem2mem (scaler, converter or codec), multi-planar",
            Role::Output => "video output: zcpipe does not use it",
            Role::Metadata => "metadata: zcpipe does not use it",
            Role::Other => "not video (VBI, SDR, touch, ...): zcpipe does not use it",
            Role::Unknown => "unknown (not opened)",
        }
    }
}

/// One `/dev/video*` node.
#[derive(Clone, Debug, Serialize)]
pub struct NodeReport {
    /// `/dev/videoN`.
    pub path: String,
    /// Owner, group, mode (`None` if stat failed).
    pub file: Option<FileMode>,
    /// Why it could not be opened or queried (`None`: it was).
    pub error: Option<String>,
    /// Driver name (`vivid`, `uvcvideo`, `rkisp1`), from VIDIOC_QUERYCAP.
    pub driver: String,
    /// Card name.
    pub card: String,
    /// Bus location (`platform:vivid-000`, `usb-0000:00:14.0-1`).
    pub bus_info: String,
    /// The node's device capabilities (`V4L2_CAP_*` bits).
    pub caps: u32,
    /// Their names, `VIDEO_CAPTURE|STREAMING`.
    pub caps_names: String,
    /// What zcpipe can do with it.
    pub role: Role,
    /// It supports streaming I/O (`V4L2_CAP_STREAMING`), which zcpipe needs.
    pub streaming: bool,
    /// The flag that uses it (`--source v4l2:/dev/video0`, `--scaler v4l2m2m:/dev/video2`).
    pub usage: Option<String>,
    /// Its video queues and their formats (capture; or output then capture for mem2mem).
    pub queues: Vec<QueueReport>,
}

/// The formats of one buffer queue.
#[derive(Clone, Debug, Serialize)]
pub struct QueueReport {
    /// `capture` or `output` (for a mem2mem device: output is what goes in).
    pub queue: &'static str,
    /// `enum v4l2_buf_type` of the queue.
    pub buf_type: u32,
    /// Every format VIDIOC_ENUM_FMT gives, in the driver's order.
    pub formats: Vec<FormatReport>,
    /// An enumeration error other than the end of the list.
    pub error: Option<String>,
}

/// One pixel format of a queue.
#[derive(Clone, Debug, Serialize)]
pub struct FormatReport {
    /// zcpipe's name for it (`NV12M`, `RGB24`) or the fourcc (`YU12`, `Y16 -BE`).
    pub name: String,
    /// The fourcc as four characters (`NM12`, `RGB3`).
    pub fourcc: String,
    /// The driver's description.
    pub description: String,
    /// zcpipe reads this format (NV12, NV12M, NV16, YUYV, RGB24, BGR24).
    pub zcpipe: bool,
    /// `V4L2_FMT_FLAG_COMPRESSED`.
    pub compressed: bool,
    /// `V4L2_FMT_FLAG_EMULATED` (libv4l software conversion).
    pub emulated: bool,
    /// Its frame sizes.
    pub sizes: Sizes,
}

/// Frame sizes of a format (VIDIOC_ENUM_FRAMESIZES,
/// Documentation/userspace-api/media/v4l/vidioc-enum-framesizes.rst).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Sizes {
    /// A list of sizes.
    Discrete {
        /// The sizes, in the driver's order (at most [`MAX_SIZES`]).
        sizes: Vec<SizeReport>,
        /// The driver had more than [`MAX_SIZES`].
        truncated: bool,
    },
    /// Any size in a range, in steps (`step` 1x1 and `continuous`: any size).
    Stepwise {
        /// Smallest `[width, height]`, pixels.
        min: [u32; 2],
        /// Largest `[width, height]`, pixels.
        max: [u32; 2],
        /// Step `[width, height]`, pixels.
        step: [u32; 2],
        /// `V4L2_FRMSIZE_TYPE_CONTINUOUS`.
        continuous: bool,
    },
    /// The driver does not enumerate sizes for this format.
    None {
        /// The ioctl's error.
        reason: String,
    },
}

/// One discrete frame size and its frame rates.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SizeReport {
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
    /// Frame rates (frames per second, from VIDIOC_ENUM_FRAMEINTERVALS): the discrete list,
    /// or for a range its ends, slowest first; empty when not asked (formats zcpipe does not
    /// read) or not enumerated.
    pub fps: Vec<f64>,
}

/// At most this many frame sizes are kept per format.
pub const MAX_SIZES: usize = 64;
/// At most this many formats are read per queue (a guard against a looping driver).
const MAX_FORMATS: u32 = 512;
/// At most this many frame intervals are read per size.
const MAX_INTERVALS: u32 = 64;
/// Frame rates are asked for the first this many discrete sizes of a format zcpipe reads.
const RATES_FOR_SIZES: usize = 16;

/// One entry of `/dev/dma_heap`.
#[derive(Clone, Debug, Serialize)]
pub struct HeapReport {
    /// Heap name (`system`, `linux,cma`).
    pub name: String,
    /// `/dev/dma_heap/<name>`.
    pub path: String,
    /// Owner, group, mode.
    pub file: Option<FileMode>,
    /// This user can open it read-only, which is all `DMA_HEAP_IOCTL_ALLOC` needs (zcpipe
    /// opens heaps so).
    pub openable: bool,
    /// This user can open it read-write.
    pub read_write: bool,
    /// Why it could not be opened.
    pub error: Option<String>,
    /// The `--heap` choice whose names include it (`system`, `dma32`, `cma`).
    pub choice: Option<String>,
    /// That choice takes this heap (the first of its names present).
    pub used_by_choice: bool,
}

/// An explicit `--heap` choice and the heap it would take.
#[derive(Clone, Debug, Serialize)]
pub struct HeapChoiceReport {
    /// `system`, `dma32` or `cma`.
    pub choice: String,
    /// The heap names it looks for, in order.
    pub looks_for: Vec<String>,
    /// The heap it takes (`None`: none present).
    pub heap: Option<String>,
}

/// What `--heap auto` does here: the result of [`Allocator::open`].
#[derive(Clone, Debug, Serialize)]
pub struct AutoReport {
    /// [`Allocator::describe`]: `dma-heap /dev/dma_heap/system`, `udmabuf`, `memfd`.
    pub allocator: Option<String>,
    /// The allocator is a real dma-buf allocator (devices can import its buffers).
    pub dma_buf: bool,
    /// Why it failed.
    pub error: Option<String>,
}

/// `/dev/udmabuf`.
#[derive(Clone, Debug, Serialize)]
pub struct UdmabufReport {
    /// The path.
    pub path: String,
    /// It exists.
    pub present: bool,
    /// Owner, group, mode.
    pub file: Option<FileMode>,
    /// This user can open it read-write (what `--heap udmabuf` does).
    pub openable: bool,
    /// Why it could not be opened.
    pub error: Option<String>,
    /// The `size_limit_mb` module parameter: the largest buffer it creates, MiB.
    pub size_limit_mb: Option<u64>,
}

/// One vendor library.
#[derive(Clone, Debug, Serialize)]
pub struct LibraryReport {
    /// The library (`librga.so`).
    pub name: String,
    /// `dlopen(3)` of one of its file names succeeded.
    pub loaded: bool,
    /// The file name that loaded (`librga.so.2`).
    pub loaded_as: Option<String>,
    /// The file the dynamic linker mapped (from /proc/self/maps), if it loaded.
    pub path: Option<String>,
    /// `dlerror()` of each file name tried, if none loaded.
    pub error: Option<String>,
    /// What the library says of itself once loaded: librga's `querystring(RGA_VERSION)`
    /// (library and RGA hardware versions); librknnrt's `RKNN_QUERY_SDK_VERSION` (API and
    /// NPU driver versions) on a context of the bundled model for this SoC.
    pub version: Option<String>,
    /// Why the version could not be read (the library loads, but its device does not answer).
    pub version_error: Option<String>,
}

/// The SoC, from the device tree.
#[derive(Clone, Debug, Serialize)]
pub struct SocReport {
    /// The root `compatible` strings, most specific (the board) first, the SoC last.
    pub compatible: Vec<String>,
    /// The last `compatible` string (`rockchip,rk3588`).
    pub soc: Option<String>,
    /// The board's `model` string.
    pub model: Option<String>,
    /// Why there is no SoC (`None`: found).
    pub error: Option<String>,
}

impl SocReport {
    /// A Rockchip SoC (`rockchip,...` among the compatible strings).
    pub fn is_rockchip(&self) -> bool {
        self.compatible.iter().any(|c| c.starts_with("rockchip,"))
    }
}

/// The RKNPU driver's version.
#[derive(Clone, Debug, Serialize)]
pub struct NpuReport {
    /// The file's first line, trimmed (`RKNPU driver: v0.9.6`).
    pub version: Option<String>,
    /// The file it came from.
    pub path: Option<String>,
    /// Why none was readable (each path tried and its error).
    pub error: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Users and groups
// ---------------------------------------------------------------------------------------------

/// The group `udev/99-zcpipe.rules` gives the device nodes to (its first `GROUP="..."`).
pub fn rules_group() -> &'static str {
    const RULES: &str = include_str!("../udev/99-zcpipe.rules");
    RULES
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|l| l.split("GROUP=\"").nth(1).and_then(|r| r.split('"').next()))
        .unwrap_or("zcpipe")
}

/// Name of id `id` in an /etc/passwd- or /etc/group-style file (`name:x:id:...`). Parsed
/// here rather than through NSS so that the static build (no NSS modules) works too.
fn id_name_in(text: &str, id: u32) -> Option<String> {
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        f.next()?;
        (f.next()?.parse::<u32>().ok()? == id).then(|| name.to_string())
    })
}

fn user_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd").ok().and_then(|t| id_name_in(&t, uid)).unwrap_or_else(|| uid.to_string())
}

fn group_name(gid: u32) -> String {
    std::fs::read_to_string("/etc/group").ok().and_then(|t| id_name_in(&t, gid)).unwrap_or_else(|| gid.to_string())
}

/// The members listed for `group` in an /etc/group-style file (4th field).
fn group_members_in(text: &str, group: &str) -> Vec<String> {
    text.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 4 && f[0] == group).then(|| f[3].split(',').filter(|m| !m.is_empty()).map(str::to_string).collect())
        })
        .unwrap_or_default()
}

/// This process's group ids (effective and supplementary).
fn my_gids() -> Vec<u32> {
    let mut v: Vec<u32> = nix::unistd::getgroups().map(|g| g.into_iter().map(|g| g.as_raw()).collect()).unwrap_or_default();
    v.push(nix::unistd::getegid().as_raw());
    v.sort_unstable();
    v.dedup();
    v
}

fn user_report() -> UserReport {
    let uid = nix::unistd::getuid().as_raw();
    UserReport { uid, name: user_name(uid), groups: my_gids().into_iter().map(group_name).collect() }
}

/// The fix for `EACCES` on `path` (owned as `file` says), given who we are: join the group
/// that may open it (or log in again if already listed in it), or install the udev rules
/// that give the nodes to the `zcpipe` group.
fn access_fix(path: &Path, file: Option<&FileMode>) -> String {
    let rules_group = rules_group();
    let install = format!(
        "install udev/99-zcpipe.rules so the {rules_group} group may open it (sudo cp udev/99-zcpipe.rules /etc/udev/rules.d/ && sudo udevadm control --reload && sudo udevadm trigger) and join that group (sudo groupadd -f {rules_group} && sudo usermod -aG {rules_group} $USER, then log in again)"
    );
    let Some(f) = file else {
        return format!("{install}; or run as root");
    };
    let group_rw = f.bits & 0o060 == 0o060;
    if f.gid == 0 {
        // Joining root's group is no fix.
        return format!("it belongs to group root (mode {}): {install}; or run as root", f.mode);
    }
    if !group_rw {
        return format!("its group {} may not read and write it (mode {}): {install}; or run as root", f.group, f.mode);
    }
    if my_gids().contains(&f.gid) {
        return format!(
            "its group {} may open it and you are in that group, so a security module (SELinux, AppArmor) or an ACL refuses {}: check `dmesg` and `getfacl {}`; or run as root",
            f.group,
            path.display(),
            path.display()
        );
    }
    let me = user_name(nix::unistd::getuid().as_raw());
    let listed = std::fs::read_to_string("/etc/group").map(|t| group_members_in(&t, &f.group).contains(&me)).unwrap_or(false);
    if listed {
        return format!("you are in the {} group in /etc/group but not in this login session: log out and in again (or run `newgrp {}`)", f.group, f.group);
    }
    let join = format!("join its group: sudo usermod -aG {} $USER, then log in again", f.group);
    if f.group == rules_group {
        format!("{join}; or run as root")
    } else {
        format!("{join}; or {install}; or run as root")
    }
}

/// Processes that have `path` open (from /proc/<pid>/fd; only those this user may inspect),
/// as `pid 1234 (zcpipe)`. `skip` is a pid to leave out (our own).
fn holders(path: &Path, skip: Option<u32>) -> Vec<String> {
    let Ok(procs) = std::fs::read_dir("/proc") else { return vec![] };
    let mut out: Vec<(u32, String)> = vec![];
    for p in procs.filter_map(|e| e.ok()) {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<u32>() else { continue };
        if Some(pid) == skip {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else { continue };
        if fds.filter_map(|e| e.ok()).any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == path)) {
            let comm = std::fs::read_to_string(p.path().join("comm")).unwrap_or_default();
            out.push((pid, comm.trim().to_string()));
        }
    }
    out.sort();
    out.into_iter().map(|(pid, comm)| format!("pid {pid} ({comm})")).collect()
}

// ---------------------------------------------------------------------------------------------
// V4L2 nodes
// ---------------------------------------------------------------------------------------------

/// A fourcc as V4L2 tools print it: four characters, with `-BE` when bit 31 (the
/// big-endian flag of `v4l2_fourcc_be`, videodev2.h) is set. Spaces are kept (`Y16 `);
/// other unprintable bytes become `?`.
pub fn fourcc_chars(code: u32) -> String {
    let s: String = (code & 0x7fff_ffff).to_le_bytes().iter().map(|&b| if (0x20..0x7f).contains(&b) { b as char } else { '?' }).collect();
    if code & 0x8000_0000 != 0 {
        format!("{s}-BE")
    } else {
        s
    }
}

/// Frames per second of a frame interval in seconds (`None` for 0/x or x/0).
fn fps_of(f: sys::Fract) -> Option<f64> {
    (f.numerator != 0 && f.denominator != 0).then(|| f.denominator as f64 / f.numerator as f64)
}

/// `30`, `29.97`, `7.5`.
pub fn fmt_fps(fps: f64) -> String {
    let s = format!("{fps:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn errno_name(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EINVAL) => "EINVAL".into(),
        Some(libc::ENOTTY) => "ENOTTY: not supported by the driver".into(),
        _ => e.to_string(),
    }
}

/// Frame rates of `fourcc` at `w`x`h`, slowest first (a range gives its two ends).
fn frame_rates(fd: std::os::fd::BorrowedFd<'_>, fourcc: Fourcc, w: u32, h: u32) -> Vec<f64> {
    let mut v = vec![];
    for index in 0..MAX_INTERVALS {
        let mut q = sys::FrmIvalEnum::new(fourcc, w, h, index);
        if sys::enum_frameintervals(fd, &mut q).is_err() {
            break;
        }
        if q.type_ == sys::V4L2_FRMIVAL_TYPE_DISCRETE {
            v.extend(fps_of(q.discrete()));
        } else {
            // A range: the longest interval is the slowest rate.
            let s = q.stepwise();
            v.extend(fps_of(s.max));
            v.extend(fps_of(s.min));
            break;
        }
    }
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

/// The frame sizes of `fourcc`, with frame rates when `rates` (formats zcpipe reads).
fn frame_sizes(fd: std::os::fd::BorrowedFd<'_>, fourcc: Fourcc, rates: bool) -> Sizes {
    let mut sizes = vec![];
    let mut truncated = false;
    for index in 0.. {
        let mut q = sys::FrmSizeEnum::new(fourcc, index);
        if let Err(e) = sys::enum_framesizes(fd, &mut q) {
            if index == 0 {
                return Sizes::None { reason: format!("VIDIOC_ENUM_FRAMESIZES: {}", errno_name(&e)) };
            }
            break;
        }
        if q.type_ != sys::V4L2_FRMSIZE_TYPE_DISCRETE {
            let s = q.stepwise();
            return Sizes::Stepwise {
                min: [s.min_width, s.min_height],
                max: [s.max_width, s.max_height],
                step: [s.step_width, s.step_height],
                continuous: q.type_ == sys::V4L2_FRMSIZE_TYPE_CONTINUOUS,
            };
        }
        if sizes.len() == MAX_SIZES {
            truncated = true;
            break;
        }
        let d = q.discrete();
        let fps = if rates && sizes.len() < RATES_FOR_SIZES { frame_rates(fd, fourcc, d.width, d.height) } else { vec![] };
        sizes.push(SizeReport { width: d.width, height: d.height, fps });
    }
    Sizes::Discrete { sizes, truncated }
}

/// Every format of queue `buf_type` (VIDIOC_ENUM_FMT until EINVAL,
/// Documentation/userspace-api/media/v4l/vidioc-enum-fmt.rst) with its sizes.
fn queue_formats(file: &File, name: &'static str, buf_type: u32, rates: bool) -> QueueReport {
    let fd = file.as_fd();
    let mut q = QueueReport { queue: name, buf_type, formats: vec![], error: None };
    for index in 0..MAX_FORMATS {
        let mut d = sys::FmtDesc { index, type_: buf_type, ..Default::default() };
        if let Err(e) = sys::enum_fmt(fd, &mut d) {
            if e.raw_os_error() != Some(libc::EINVAL) {
                q.error = Some(format!("VIDIOC_ENUM_FMT: {}", errno_name(&e)));
            }
            break;
        }
        let fourcc = d.fourcc();
        let zcpipe = PREFERRED.contains(&fourcc);
        q.formats.push(FormatReport {
            name: if zcpipe { format_name(fourcc) } else { fourcc_chars(d.pixelformat).trim_end().to_string() },
            fourcc: fourcc_chars(d.pixelformat),
            description: d.description().into_owned(),
            zcpipe,
            compressed: d.flags & sys::V4L2_FMT_FLAG_COMPRESSED != 0,
            emulated: d.flags & sys::V4L2_FMT_FLAG_EMULATED != 0,
            sizes: frame_sizes(fd, fourcc, rates && zcpipe),
        });
    }
    q
}

fn node_problem_for_error(path: &Path, e: &io::Error, file: Option<&FileMode>) -> Problem {
    let about = path.display().to_string();
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => Problem {
            what: format!("{about}: permission denied ({})", file.map(FileMode::describe).unwrap_or_else(|| "mode unknown".into())),
            fix: access_fix(path, file),
            about,
        },
        Some(libc::EBUSY) => {
            let h = holders(path, Some(std::process::id()));
            let who = if h.is_empty() {
                "by a process this user cannot see (or one that has since exited)".to_string()
            } else {
                format!("held by {}", h.join(", "))
            };
            Problem {
                what: format!("{about}: busy (EBUSY): its driver allows one user at a time and another process has it open, {who}"),
                fix: format!("stop the other user of {about} (`fuser -v {about}` names it), then run zcpipe doctor again"),
                about,
            }
        }
        Some(libc::ENOTTY) => Problem {
            what: format!("{about}: not a V4L2 device (VIDIOC_QUERYCAP: ENOTTY)"),
            fix: "check which driver created it (`udevadm info {about}`); zcpipe reads V4L2 video nodes only".replace("{about}", &about),
            about,
        },
        _ => Problem {
            what: format!("{about}: cannot open or query it: {e}"),
            fix: "check `dmesg` for its driver's messages; replug the device or reload its driver module".into(),
            about,
        },
    }
}

/// Examines one node; problems go to `problems`.
fn examine_node(path: &Path, problems: &mut Vec<Problem>) -> NodeReport {
    let file = FileMode::of(path);
    let mut r = NodeReport {
        path: path.display().to_string(),
        file: file.clone(),
        error: None,
        driver: String::new(),
        card: String::new(),
        bus_info: String::new(),
        caps: 0,
        caps_names: String::new(),
        role: Role::Unknown,
        streaming: false,
        usage: None,
        queues: vec![],
    };
    let info: NodeInfo = match probe_node(path).and_then(|i| open_node(path).map(|f| (i, f))) {
        Ok((info, f)) => {
            r.role = Role::from_caps(info.caps);
            let rates = matches!(r.role, Role::Capture | Role::CaptureMplane);
            r.queues = r.role.queues().iter().map(|&(name, t)| queue_formats(&f, name, t, rates)).collect();
            info
        }
        Err(e) => {
            r.error = Some(e.to_string());
            problems.push(node_problem_for_error(path, &e, file.as_ref()));
            return r;
        }
    };
    r.driver = info.driver.clone();
    r.card = info.card.clone();
    r.bus_info = info.cap.bus_info().into_owned();
    r.caps = info.caps;
    r.caps_names = caps_names(info.caps);
    r.streaming = info.cap.has_streaming();
    let p = path.display();
    r.usage = match r.role {
        Role::Capture | Role::CaptureMplane if r.streaming => Some(format!("--source v4l2:{p}")),
        Role::Mem2mem | Role::Mem2memMplane if r.streaming => Some(format!("--scaler v4l2m2m:{p}")),
        _ => None,
    };
    if matches!(r.role, Role::Capture | Role::CaptureMplane) {
        if !r.streaming {
            problems.push(Problem {
                what: format!("{}: captures, but only with read(): no streaming I/O (V4L2_CAP_STREAMING)", info.label()),
                fix: "zcpipe needs streaming I/O (MMAP/DMABUF buffers): use another node of this device, or a driver that streams".into(),
                about: r.path.clone(),
            });
        } else if let Some(q) = r.queues.first() {
            if !q.formats.is_empty() && !q.formats.iter().any(|f| f.zcpipe) {
                let offered: Vec<&str> = q.formats.iter().map(|f| f.name.as_str()).collect();
                problems.push(Problem {
                    what: format!(
                        "{}: offers none of the formats zcpipe reads ({}); it offers {}",
                        info.label(),
                        PREFERRED.map(format_name).join(", "),
                        offered.join(", ")
                    ),
                    fix: "use another capture node, or set the device to an uncompressed mode (many webcams offer YUYV beside MJPEG; `v4l2-ctl -d NODE --list-formats-ext` shows them)"
                        .replace("NODE", &r.path),
                    about: r.path.clone(),
                });
            }
        }
    }
    r
}

/// The fix when there is no camera node.
fn no_camera_fix() -> String {
    "connect a camera (USB webcams: the uvcvideo module; on a board: the camera's driver and device-tree overlay, then check `dmesg`); to test without one, load the virtual devices: sudo modprobe vivid (a camera) and sudo modprobe vim2m (a mem2mem scaler); without a camera zcpipe still runs on --source testsrc, image:PATH or video:PATH".into()
}

fn nodes_section(problems: &mut Vec<Problem>) -> Vec<NodeReport> {
    let nodes: Vec<NodeReport> = video_nodes().iter().map(|p| examine_node(p, problems)).collect();
    if nodes.is_empty() {
        problems.push(Problem {
            what: "no V4L2 video node: /dev/video* does not exist, so there is no camera and no V4L2 mem2mem scaler".into(),
            fix: no_camera_fix(),
            about: "/dev/video*".into(),
        });
    } else if !nodes.iter().any(|n| matches!(n.role, Role::Capture | Role::CaptureMplane) && n.streaming) {
        // Nodes that failed to open have a problem of their own.
        if nodes.iter().all(|n| n.error.is_none()) {
            problems.push(Problem {
                what: format!("no capture node among {} video node(s): --source auto falls back to the bundled clip", nodes.len()),
                fix: no_camera_fix(),
                about: "/dev/video*".into(),
            });
        }
    }
    nodes
}

// ---------------------------------------------------------------------------------------------
// Heaps and udmabuf
// ---------------------------------------------------------------------------------------------

const CHOICES: [(HeapChoice, &str); 3] = [(HeapChoice::System, "system"), (HeapChoice::Dma32, "dma32"), (HeapChoice::Cma, "cma")];

/// Every heap name zcpipe knows, with its `--heap` choice: `system (--heap system),
/// system-dma32 or dma32 (--heap dma32), ...`.
fn known_heaps() -> String {
    CHOICES.iter().map(|(c, n)| format!("{} (--heap {n})", heap_names(*c).join(" or "))).collect::<Vec<_>>().join(", ")
}

const HEAP_KERNEL_FIX: &str = "build the kernel with CONFIG_DMABUF_HEAPS=y and CONFIG_DMABUF_HEAPS_SYSTEM=y (and CONFIG_DMABUF_HEAPS_CMA=y, with a CMA area such as cma=64M on the kernel command line, for a contiguous heap); Rockchip BSP kernels have them. Until then zcpipe uses /dev/udmabuf, else sealed memfds, which are not dma-bufs: fine on a PC, but no device can import them";

fn open_ro(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).custom_flags(libc::O_CLOEXEC).open(path)
}

fn open_rw(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).write(true).custom_flags(libc::O_CLOEXEC).open(path)
}

fn heaps_section(paths: &Paths, problems: &mut Vec<Problem>) -> (Vec<HeapReport>, Vec<HeapChoiceReport>, AutoReport) {
    let dir = &paths.heap_dir;
    let names = list_heaps(dir);
    let choice_reports: Vec<HeapChoiceReport> = CHOICES
        .iter()
        .map(|&(c, n)| HeapChoiceReport {
            choice: n.into(),
            looks_for: heap_names(c).iter().map(|s| s.to_string()).collect(),
            heap: heap_names(c).iter().find(|h| names.iter().any(|x| x == *h)).map(|h| h.to_string()),
        })
        .collect();
    let mut heaps = vec![];
    let mut open_problem = false;
    for name in &names {
        let path = dir.join(name);
        let file = FileMode::of(&path);
        let ro = open_ro(&path);
        let rw = open_rw(&path);
        let choice = CHOICES.iter().find(|(c, _)| heap_names(*c).contains(&name.as_str())).map(|(_, n)| n.to_string());
        let used = choice_reports.iter().any(|c| c.heap.as_deref() == Some(name.as_str()));
        if let Err(e) = &ro {
            open_problem = true;
            problems.push(Problem {
                what: format!("{}: cannot open it: {e} ({})", path.display(), file.as_ref().map(FileMode::describe).unwrap_or_default()),
                fix: if e.kind() == io::ErrorKind::PermissionDenied { access_fix(&path, file.as_ref()) } else { "check `dmesg`".into() },
                about: path.display().to_string(),
            });
        }
        heaps.push(HeapReport {
            name: name.clone(),
            path: path.display().to_string(),
            file,
            openable: ro.is_ok(),
            read_write: rw.is_ok(),
            error: ro.err().map(|e| e.to_string()),
            choice,
            used_by_choice: used,
        });
    }
    if names.is_empty() {
        let why = if dir.is_dir() { "is empty" } else { "does not exist" };
        problems.push(Problem {
            what: format!("no dma-buf heap: {} {why}; zcpipe looks for {}", dir.display(), known_heaps()),
            fix: HEAP_KERNEL_FIX.into(),
            about: dir.display().to_string(),
        });
    } else if choice_reports.iter().all(|c| c.heap.is_none()) {
        problems.push(Problem {
            what: format!("no dma-buf heap zcpipe knows in {}: it has {}; zcpipe looks for {}", dir.display(), names.join(", "), known_heaps()),
            fix: HEAP_KERNEL_FIX.into(),
            about: dir.display().to_string(),
        });
    }
    // Allocator::open logs its choice at info level; the report says it, once.
    let opened = quietly(|| Allocator::open(HeapChoice::Auto, dir, &paths.udmabuf));
    let auto = match opened {
        Ok(a) => AutoReport { dma_buf: !matches!(a, Allocator::Memfd), allocator: Some(a.describe()), error: None },
        Err(e) => {
            if !open_problem {
                problems.push(Problem {
                    what: format!("--heap auto fails: {e:#}"),
                    fix: "fix the heap it names (see above), or pick another with --heap".into(),
                    about: dir.display().to_string(),
                });
            }
            AutoReport { allocator: None, dma_buf: false, error: Some(format!("{e:#}")) }
        }
    };
    (heaps, choice_reports, auto)
}

fn udmabuf_section(paths: &Paths, heap_usable: bool, problems: &mut Vec<Problem>) -> UdmabufReport {
    let path = &paths.udmabuf;
    let about = path.display().to_string();
    let size_limit_mb = std::fs::read_to_string(paths.udmabuf_params.join("size_limit_mb")).ok().and_then(|s| s.trim().parse().ok());
    let mut r = UdmabufReport { path: about.clone(), present: path.exists(), file: FileMode::of(path), openable: false, error: None, size_limit_mb };
    if !r.present {
        if !heap_usable {
            problems.push(Problem {
                what: format!("{about} does not exist, and there is no usable dma-buf heap either: zcpipe's buffers are sealed memfds, which no device can import"),
                fix: "sudo modprobe udmabuf (kernel: CONFIG_UDMABUF=y or =m), then install udev/99-zcpipe.rules so the zcpipe group may open it; better, enable a dma-buf heap (see the heaps section)".into(),
                about,
            });
        }
        return r;
    }
    match open_rw(path) {
        Ok(_) => r.openable = true,
        Err(e) => {
            r.error = Some(e.to_string());
            problems.push(Problem {
                what: format!("{about}: cannot open it read-write: {e} ({})", r.file.as_ref().map(FileMode::describe).unwrap_or_default()),
                fix: if e.kind() == io::ErrorKind::PermissionDenied { access_fix(path, r.file.as_ref()) } else { "check `dmesg`".into() },
                about,
            });
        }
    }
    r
}

// ---------------------------------------------------------------------------------------------
// Vendor libraries, SoC, NPU driver
// ---------------------------------------------------------------------------------------------

/// The file mapped for a library whose file name starts with `stem` (`librga.so`), from
/// /proc/self/maps (proc(5)): where the dynamic linker found it.
fn mapped_path(stem: &str) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| Path::new(p).file_name().is_some_and(|f| f.to_string_lossy().starts_with(stem)))
        .map(str::to_string)
}

/// Loads a library with `dlopen(3)` under each of `names` in turn (`RTLD_LAZY |
/// RTLD_LOCAL`: symbols resolved on first use, none exported to later loads) until one
/// loads, and unloads it; the report says which loaded and from where, or every
/// `dlerror()`. Loading runs the library's initialisers, as using it would.
pub fn check_library(names: &[String]) -> LibraryReport {
    // The report's name is the first plain name (an env-given path comes first but is not
    // the library's name).
    let name = names.iter().find(|n| !n.contains('/')).or(names.first()).cloned().unwrap_or_default();
    let mut r = LibraryReport { name, loaded: false, loaded_as: None, path: None, error: None, version: None, version_error: None };
    let mut errors = vec![];
    for n in names {
        match dlopen_check(n) {
            Ok(path) => {
                r.loaded = true;
                r.loaded_as = Some(n.clone());
                r.path = path;
                return r;
            }
            Err(e) => errors.push(e),
        }
    }
    r.error = Some(errors.join("; "));
    r
}

/// `dlopen(name)` then `dlclose`: `Ok(the mapped file)` or `Err(dlerror())`.
fn dlopen_check(name: &str) -> std::result::Result<Option<String>, String> {
    let Ok(c) = CString::new(name) else {
        return Err(format!("{name:?}: the name contains a NUL byte"));
    };
    // SAFETY: `c` is a NUL-terminated string that outlives the call; dlopen(3) does not keep
    // the pointer. The returned handle is used only for the dlclose below.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror(3) returns NULL or a NUL-terminated string that stays valid until the
        // next dl* call on this thread; it is copied at once, before any other dl* call.
        let e = unsafe { libc::dlerror() };
        return Err(if e.is_null() {
            format!("{name}: dlopen failed (no dlerror message)")
        } else {
            // SAFETY: `e` is non-null and NUL-terminated (above).
            unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
        });
    }
    let file = Path::new(name).file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_else(|| name.to_string());
    let stem = file.split(".so").next().unwrap_or(&file);
    let path = mapped_path(&format!("{stem}.so"));
    // SAFETY: `handle` came from the successful dlopen above and is closed once; no symbol or
    // pointer into the library was taken, so nothing refers to it after the close.
    unsafe { libc::dlclose(handle) };
    Ok(path)
}

/// Splits the device tree's `compatible` property (NUL-separated strings).
pub fn parse_compatible(bytes: &[u8]) -> Vec<String> {
    bytes.split(|&b| b == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect()
}

fn soc_section(paths: &Paths) -> SocReport {
    let model = std::fs::read(&paths.model).ok().map(|b| parse_compatible(&b).join(" ")).filter(|s| !s.is_empty());
    match std::fs::read(&paths.compatible) {
        Ok(b) => {
            let compatible = parse_compatible(&b);
            let soc = compatible.last().cloned();
            let error = soc.is_none().then(|| format!("{} is empty", paths.compatible.display()));
            SocReport { compatible, soc, model, error }
        }
        Err(e) => SocReport {
            compatible: vec![],
            soc: None,
            model,
            error: Some(if e.kind() == io::ErrorKind::NotFound {
                format!("{} does not exist: no device tree (an x86 PC or VM, or a board booted with ACPI)", paths.compatible.display())
            } else {
                format!("{}: {e}", paths.compatible.display())
            }),
        },
    }
}

fn npu_section(paths: &Paths) -> NpuReport {
    let mut errors = vec![];
    for p in &paths.npu_version {
        match std::fs::read_to_string(p) {
            Ok(t) => {
                let v = t.lines().next().unwrap_or("").trim().to_string();
                if !v.is_empty() {
                    return NpuReport { version: Some(v), path: Some(p.display().to_string()), error: None };
                }
                errors.push(format!("{}: empty", p.display()));
            }
            Err(e) => errors.push(format!("{}: {e}", p.display())),
        }
    }
    NpuReport { version: None, path: None, error: Some(errors.join("; ")) }
}

/// Runs `f` with info logging off: what the backends log while doctor looks (the heap it
/// chose, the librga version) is in the report already. Doctor is single-threaded, so
/// lowering the global level for the call hides only those lines.
fn quietly<T>(f: impl FnOnce() -> T) -> T {
    let level = log::max_level();
    log::set_max_level(level.min(log::LevelFilter::Warn));
    let r = f();
    log::set_max_level(level);
    r
}

/// librga's own description, as `--scaler rga` gets it: a harmless `imcheck_t` probe of the
/// driver first (librga 1.10.3's `querystring` crashes without `/dev/rga`), then
/// `querystring(RGA_VERSION)`.
fn rga_version(lib: &str) -> std::result::Result<String, String> {
    // RgaScaler::open logs the version at info level; the report says it, once.
    let s = quietly(|| crate::scale::rga::RgaScaler::open(Some(Path::new(lib)), crate::scale::rga::RgaCore::Auto)).map_err(|e| format!("{e:#}"))?;
    let n = crate::scale::DeviceScaler::name(&s);
    Ok(n.strip_prefix("rga (").and_then(|n| n.strip_suffix(')')).unwrap_or(&n).to_string())
}

/// The bundled model for `soc` (`rockchip,rk3588` -> `yolox_nano_416_rk3588.rknn`; any
/// other or none: the RK3588 one, which the fake runtime and the SDK query accept).
fn bundled_rknn_model(soc: Option<&str>) -> &'static str {
    match soc.and_then(|s| s.strip_prefix("rockchip,")) {
        Some("rk3566" | "rk3568") => "models/yolox_nano_416_rk3566_rk3568.rknn",
        Some("rk3576") => "models/yolox_nano_416_rk3576.rknn",
        _ => "models/yolox_nano_416_rk3588.rknn",
    }
}

/// librknnrt's API and driver versions (rknn_api.h `RKNN_QUERY_SDK_VERSION`), which need a
/// context: the bundled model for this SoC is loaded (`rknn_init`), queried and released.
fn rknn_version(lib: &str, soc: Option<&str>) -> std::result::Result<String, String> {
    use crate::sys::rknn as sys;
    let rknn = sys::Rknn::open_path(lib.into(), false).map_err(|e| format!("{e:#}"))?;
    let rel = bundled_rknn_model(soc);
    let model = crate::infer::stage::resolve_data_path(Path::new(rel));
    let bytes = std::fs::read(&model).map_err(|e| format!("the SDK version needs a model to query and {} is unreadable ({e}); copy models/ next to zcpipe or set ZCPIPE_DATA_DIR", model.display()))?;
    let ctx = rknn.init(&bytes, 0).map_err(|e| format!("rknn_init of {}: {e}", model.display()))?;
    let mut ver = sys::RknnSdkVersion::default();
    let q = rknn.query(ctx, sys::RKNN_QUERY_SDK_VERSION, &mut ver);
    let _ = rknn.destroy(ctx);
    q.map_err(|e| format!("RKNN_QUERY_SDK_VERSION: {e}"))?;
    Ok(format!("api {}, driver {} (queried with {})", sys::c_text(&ver.api_version), sys::c_text(&ver.drv_version), rel))
}

/// What zcpipe uses each vendor library for.
fn library_use(name: &str) -> &'static str {
    match name {
        "librga.so" => "the RGA scaler (--scaler rga)",
        "librknnrt.so" => "inference on the NPU (the RKNN backend)",
        _ => "a vendor backend",
    }
}

/// Where each vendor library comes from, for the fix.
fn library_fix(name: &str) -> String {
    match name {
        "librga.so" => "install librga (Rockchip's RGA library: the librga2 package of the board's image, or build github.com/airockchip/librga into /usr/lib), then `sudo ldconfig`".into(),
        "librknnrt.so" => "install the RKNN runtime: librknnrt.so from github.com/airockchip/rknn-toolkit2 (rknpu2/runtime/Linux/librknn_api/aarch64/), matching the NPU driver, into /usr/lib, then `sudo ldconfig`".into(),
        _ => format!("install {name} where the dynamic linker finds it (/usr/lib, or LD_LIBRARY_PATH), then `sudo ldconfig`"),
    }
}

fn vendor_section(paths: &Paths, problems: &mut Vec<Problem>) -> (Vec<LibraryReport>, SocReport, NpuReport) {
    let mut libs: Vec<LibraryReport> = paths.libraries.iter().map(|n| check_library(n)).collect();
    let soc = soc_section(paths);
    for l in libs.iter_mut().filter(|l| l.loaded) {
        let v = match l.name.as_str() {
            "librga.so" => rga_version(l.loaded_as.as_deref().unwrap_or("librga.so")),
            "librknnrt.so" => rknn_version(l.loaded_as.as_deref().unwrap_or("librknnrt.so"), soc.soc.as_deref()),
            _ => continue,
        };
        match v {
            Ok(v) => l.version = Some(v),
            Err(e) => {
                problems.push(Problem {
                    what: format!("{} loads but does not answer: {e}", l.name),
                    fix: match l.name.as_str() {
                        "librga.so" => "check that the RGA driver is loaded (dmesg | grep -i rga) and /dev/rga is readable and writable (udev/99-zcpipe.rules, group zcpipe)".into(),
                        _ => "check the NPU driver (dmesg | grep -i rknpu; its version file above) and that its node is readable and writable (udev/99-zcpipe.rules); librknnrt must be at least as new as the rknn-toolkit2 that built the model (2.5.0)".into(),
                    },
                    about: l.name.clone(),
                });
                l.version_error = Some(e);
            }
        }
    }
    let npu = npu_section(paths);
    if soc.is_rockchip() {
        for l in libs.iter().filter(|l| !l.loaded) {
            problems.push(Problem {
                what: format!(
                    "{} does not load on this Rockchip board ({}), so {} is unavailable: {}",
                    l.name,
                    soc.soc.as_deref().unwrap_or("?"),
                    library_use(&l.name),
                    l.error.as_deref().unwrap_or("")
                ),
                fix: library_fix(&l.name),
                about: l.name.clone(),
            });
        }
    }
    (libs, soc, npu)
}

// ---------------------------------------------------------------------------------------------
// Gathering and printing
// ---------------------------------------------------------------------------------------------

/// Looks at everything; never fails (what cannot be read is reported as such).
pub fn gather(paths: &Paths) -> Report {
    let mut problems = vec![];
    let nodes = nodes_section(&mut problems);
    let (heaps, heap_choices, heap_auto) = heaps_section(paths, &mut problems);
    let heap_usable = heaps.iter().any(|h| h.openable && h.choice.is_some());
    let udmabuf = udmabuf_section(paths, heap_usable, &mut problems);
    let (libraries, soc, npu_driver) = vendor_section(paths, &mut problems);
    Report {
        zcpipe: env!("CARGO_PKG_VERSION").into(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_else(|e| format!("unknown ({e})")),
        user: user_report(),
        nodes,
        heap_dir: paths.heap_dir.display().to_string(),
        heaps,
        heap_choices,
        heap_auto,
        udmabuf,
        libraries,
        soc,
        npu_driver,
        problems,
    }
}

/// Sizes in one line: `320x180 (1-60 fps), 640x480 (30 fps), ... (12 sizes)`, or a range.
pub fn sizes_text(s: &Sizes) -> String {
    const SHOW: usize = 8;
    match s {
        Sizes::Discrete { sizes, truncated } => {
            if sizes.is_empty() {
                return "no sizes".into();
            }
            let mut v: Vec<String> = sizes
                .iter()
                .take(SHOW)
                .map(|z| match z.fps.as_slice() {
                    [] => format!("{}x{}", z.width, z.height),
                    [one] => format!("{}x{} ({} fps)", z.width, z.height, fmt_fps(*one)),
                    [lo, .., hi] => format!("{}x{} ({}-{} fps)", z.width, z.height, fmt_fps(*lo), fmt_fps(*hi)),
                })
                .collect();
            if sizes.len() > SHOW || *truncated {
                v.push(format!("... ({}{} sizes)", sizes.len(), if *truncated { "+" } else { "" }));
            }
            v.join(", ")
        }
        Sizes::Stepwise { min, max, step, continuous } => {
            if *continuous || (step[0] <= 1 && step[1] <= 1) {
                format!("any size from {}x{} to {}x{}", min[0], min[1], max[0], max[1])
            } else {
                format!("{}x{} to {}x{} in steps of {}x{}", min[0], min[1], max[0], max[1], step[0], step[1])
            }
        }
        Sizes::None { reason } => format!("sizes not enumerated ({reason})"),
    }
}

/// Words of `items` joined by ", " and wrapped at about 100 columns after `indent`.
fn wrapped(items: &[String], indent: &str) -> String {
    let mut out = String::new();
    let mut col = 0;
    for (i, it) in items.iter().enumerate() {
        let piece = if i + 1 < items.len() { format!("{it}, ") } else { it.clone() };
        if col > 0 && col + piece.len() > 100 {
            out.truncate(out.trim_end().len());
            out.push('\n');
            out.push_str(indent);
            col = indent.len();
        }
        out.push_str(&piece);
        col += piece.len();
    }
    out.trim_end().to_string()
}

fn push_problems(out: &mut String, problems: &[Problem], about: &str, done: &mut [bool]) {
    for (i, p) in problems.iter().enumerate() {
        if !done[i] && p.about == about {
            done[i] = true;
            out.push_str(&format!("problem: {}\nfix: {}\n", p.what, p.fix));
        }
    }
}

fn queue_text(out: &mut String, role: Role, q: &QueueReport) {
    let title = match (role, q.queue) {
        (Role::Mem2mem | Role::Mem2memMplane, "output") => "OUTPUT queue (frames going in)",
        (Role::Mem2mem | Role::Mem2memMplane, _) => "CAPTURE queue (frames coming out)",
        _ => "capture formats",
    };
    out.push_str(&format!("    {title}: {} format(s)", q.formats.len()));
    if let Some(e) = &q.error {
        out.push_str(&format!(" (enumeration stopped: {e})"));
    }
    out.push('\n');
    // Long lists (vivid has about 70): zcpipe's formats one per line, the others by name.
    let compact = q.formats.len() > 12;
    let mut others = vec![];
    for f in &q.formats {
        if compact && !f.zcpipe {
            others.push(f.name.clone());
            continue;
        }
        let name = if f.name != f.fourcc { format!("{} ({})", f.name, f.fourcc) } else { f.name.clone() };
        let mut flags = String::new();
        if f.zcpipe {
            flags.push_str(" [zcpipe]");
        }
        if f.compressed {
            flags.push_str(" [compressed]");
        }
        if f.emulated {
            flags.push_str(" [emulated]");
        }
        out.push_str(&format!("      {name}: \"{}\"{flags}: {}\n", f.description, sizes_text(&f.sizes)));
    }
    if !others.is_empty() {
        out.push_str(&format!("      {} more, zcpipe does not read them: {}\n", others.len(), wrapped(&others, "        ")));
    }
}

/// The report as text: one section per item, `problem:`/`fix:` line pairs under the item
/// they concern, and a count at the end.
pub fn text(r: &Report) -> String {
    let mut out = String::new();
    let mut done = vec![false; r.problems.len()];
    out.push_str(&format!(
        "zcpipe doctor {}: kernel {}, user {} (uid {}, groups {})\n",
        r.zcpipe,
        r.kernel,
        r.user.name,
        r.user.uid,
        r.user.groups.join(",")
    ));

    out.push_str(&format!("\n== V4L2 video nodes (/dev/video*): {} ==\n", r.nodes.len()));
    out.push_str(&format!(
        "  [zcpipe] marks the pixel formats zcpipe reads ({})\n",
        PREFERRED.map(format_name).join(", ")
    ));
    for n in &r.nodes {
        let mode = n.file.as_ref().map(FileMode::describe).unwrap_or_else(|| "mode unknown".into());
        match &n.error {
            Some(e) => out.push_str(&format!("  {}: {mode}: cannot open: {e}\n", n.path)),
            None => {
                out.push_str(&format!("  {}: driver {}, card \"{}\", bus {}, {mode}\n", n.path, n.driver, n.card, n.bus_info));
                out.push_str(&format!("    caps: {}\n", n.caps_names));
                let usage = match (&n.usage, n.role) {
                    (Some(u), Role::Mem2mem | Role::Mem2memMplane) => format!("; zcpipe can scale on it: {u}"),
                    (Some(u), _) => format!("; zcpipe can capture from it: {u}"),
                    (None, Role::Capture | Role::CaptureMplane | Role::Mem2mem | Role::Mem2memMplane) => {
                        "; no streaming I/O, so zcpipe cannot use it".into()
                    }
                    (None, _) => String::new(),
                };
                out.push_str(&format!("    role: {}{usage}\n", n.role.describe()));
                for q in &n.queues {
                    queue_text(&mut out, n.role, q);
                }
            }
        }
        push_problems(&mut out, &r.problems, &n.path, &mut done);
    }
    if r.nodes.is_empty() {
        out.push_str("  none\n");
    }
    push_problems(&mut out, &r.problems, "/dev/video*", &mut done);

    let heap_dir = &r.heap_dir;
    out.push_str(&format!("\n== dma-buf heaps ({heap_dir}): {} ==\n", r.heaps.len()));
    for h in &r.heaps {
        let mode = h.file.as_ref().map(FileMode::describe).unwrap_or_else(|| "mode unknown".into());
        let access = match (h.openable, h.read_write) {
            (true, true) => "opens read-write".to_string(),
            (true, false) => "opens read-only (enough: zcpipe allocates through a read-only fd)".to_string(),
            (false, _) => format!("cannot open: {}", h.error.as_deref().unwrap_or("?")),
        };
        let used = match (&h.choice, h.used_by_choice) {
            (Some(c), true) => format!("--heap {c}"),
            (Some(c), false) => {
                let first = r.heap_choices.iter().find(|x| &x.choice == c).and_then(|x| x.heap.clone()).unwrap_or_default();
                format!("a {c} heap, but --heap {c} takes {first} first")
            }
            (None, _) => "no --heap choice uses this name".into(),
        };
        out.push_str(&format!("  {}: {mode}, {access}; {used}\n", h.path));
        push_problems(&mut out, &r.problems, &h.path, &mut done);
    }
    if r.heaps.is_empty() {
        out.push_str("  none\n");
    }
    for c in r.heap_choices.iter().filter(|c| c.heap.is_none()) {
        out.push_str(&format!("  --heap {}: no heap (looks for {})\n", c.choice, c.looks_for.join(", ")));
    }
    push_problems(&mut out, &r.problems, heap_dir, &mut done);
    match (&r.heap_auto.allocator, &r.heap_auto.error) {
        (Some(a), _) if r.heap_auto.dma_buf => out.push_str(&format!("  --heap auto uses: {a}\n")),
        (Some(a), _) => out.push_str(&format!("  --heap auto uses: {a} (not dma-bufs: no device can import them)\n")),
        (None, Some(e)) => out.push_str(&format!("  --heap auto fails: {e}\n")),
        (None, None) => {}
    }

    let u = &r.udmabuf;
    out.push_str(&format!("\n== udmabuf ({}) ==\n", u.path));
    if u.present {
        let mode = u.file.as_ref().map(FileMode::describe).unwrap_or_else(|| "mode unknown".into());
        let access = if u.openable { "opens read-write".to_string() } else { format!("cannot open: {}", u.error.as_deref().unwrap_or("?")) };
        let limit = u.size_limit_mb.map(|m| format!("; buffers up to {m} MiB (size_limit_mb)")).unwrap_or_default();
        out.push_str(&format!("  present, {mode}, {access}{limit}; --heap udmabuf\n"));
    } else {
        out.push_str("  absent (only --heap udmabuf, or --heap auto without a heap, uses it; sudo modprobe udmabuf loads it)\n");
    }
    push_problems(&mut out, &r.problems, &u.path, &mut done);

    out.push_str("\n== vendor libraries ==\n");
    for l in &r.libraries {
        let used = library_use(&l.name);
        match (l.loaded, &l.loaded_as, &l.path) {
            (true, Some(n), Some(p)) => out.push_str(&format!("  {}: loads as {n} ({p}): {used} can run\n", l.name)),
            (true, _, _) => out.push_str(&format!("  {}: loads: {used} can run\n", l.name)),
            (false, _, _) => {
                let note = if r.soc.is_rockchip() { String::new() } else { format!("; only Rockchip boards have it, for {used}") };
                out.push_str(&format!("  {}: does not load ({}){note}\n", l.name, l.error.as_deref().unwrap_or("?")))
            }
        }
        if let Some(v) = &l.version {
            out.push_str(&format!("    version: {v}\n"));
        }
        if let Some(e) = &l.version_error {
            out.push_str(&format!("    version: unknown: {e}\n"));
        }
        push_problems(&mut out, &r.problems, &l.name, &mut done);
    }
    match (&r.soc.soc, &r.soc.error) {
        (Some(s), _) => {
            let model = r.soc.model.as_ref().map(|m| format!("board \"{m}\", ")).unwrap_or_default();
            out.push_str(&format!("  SoC: {s} ({model}compatible: {})\n", r.soc.compatible.join(", ")));
        }
        (None, e) => out.push_str(&format!("  SoC: unknown: {}\n", e.as_deref().unwrap_or("?"))),
    }
    match (&r.npu_driver.version, &r.npu_driver.path) {
        (Some(v), Some(p)) => out.push_str(&format!("  NPU driver: {v} ({p})\n")),
        _ => {
            let hint = if r.soc.is_rockchip() { " (debugfs is readable by root only: run doctor as root)" } else { "" };
            out.push_str(&format!("  NPU driver: no version file readable: {}{hint}\n", r.npu_driver.error.as_deref().unwrap_or("?")));
        }
    }

    // Anything not printed under its item (should not happen) goes here.
    for (i, p) in r.problems.iter().enumerate() {
        if !done[i] {
            out.push_str(&format!("problem: {}\nfix: {}\n", p.what, p.fix));
        }
    }
    out.push_str(&match r.problems.len() {
        0 => "\nno problems found\n".to_string(),
        1 => "\n1 problem found (its fix is under it)\n".to_string(),
        n => format!("\n{n} problems found (each fix is under its problem)\n"),
    });
    out
}

/// Runs `zcpipe doctor`: prints the report (text, or JSON with `--json`) on stdout.
/// Returns exit code 0 whatever it finds; only failing to write stdout is an error (a
/// closed pipe, as in `zcpipe doctor | head`, is not).
pub fn run(args: DoctorArgs) -> Result<i32> {
    let r = gather(&Paths::default());
    let s = if args.json { serde_json::to_string_pretty(&r)? + "\n" } else { text(&r) };
    match io::stdout().lock().write_all(s.as_bytes()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(0),
        r => r.map(|_| 0).map_err(|e| anyhow::anyhow!("writing the report to stdout: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp_paths(dir: &Path) -> Paths {
        Paths {
            heap_dir: dir.join("dma_heap"),
            udmabuf: dir.join("udmabuf"),
            udmabuf_params: dir.join("params"),
            compatible: dir.join("compatible"),
            model: dir.join("model"),
            npu_version: vec![dir.join("debug-version"), dir.join("proc-version")],
            libraries: vec![],
        }
    }

    #[test]
    fn the_rules_file_names_the_zcpipe_group() {
        assert_eq!(rules_group(), "zcpipe");
    }

    #[test]
    fn roles_come_from_device_caps() {
        use sys::*;
        assert_eq!(Role::from_caps(V4L2_CAP_VIDEO_CAPTURE | V4L2_CAP_STREAMING), Role::Capture);
        assert_eq!(Role::from_caps(V4L2_CAP_VIDEO_CAPTURE_MPLANE | V4L2_CAP_STREAMING), Role::CaptureMplane);
        assert_eq!(Role::from_caps(V4L2_CAP_VIDEO_M2M | V4L2_CAP_STREAMING), Role::Mem2mem);
        assert_eq!(Role::from_caps(V4L2_CAP_VIDEO_M2M_MPLANE | V4L2_CAP_STREAMING), Role::Mem2memMplane);
        assert_eq!(Role::from_caps(V4L2_CAP_VIDEO_CAPTURE | V4L2_CAP_VIDEO_OUTPUT), Role::Mem2mem, "old-style m2m");
        assert_eq!(Role::from_caps(V4L2_CAP_VIDEO_OUTPUT_MPLANE), Role::Output);
        assert_eq!(Role::from_caps(V4L2_CAP_META_CAPTURE | V4L2_CAP_STREAMING), Role::Metadata);
        assert_eq!(Role::from_caps(0x10), Role::Other, "VBI capture");
        assert_eq!(Role::Mem2memMplane.queues(), &[("output", 10), ("capture", 9)]);
        assert_eq!(Role::Capture.queues(), &[("capture", 1)]);
        assert!(Role::Output.queues().is_empty());
    }

    #[test]
    fn fourccs_rates_and_sizes_read_as_v4l2_tools_print_them() {
        assert_eq!(fourcc_chars(sys::V4L2_PIX_FMT_NV12M), "NM12");
        assert_eq!(fourcc_chars(u32::from_le_bytes(*b"Y16 ") | 0x8000_0000), "Y16 -BE");
        assert_eq!(fourcc_chars(u32::from_le_bytes(*b"GREY")), "GREY");
        assert_eq!(fourcc_chars(u32::from_le_bytes([b'A', 0, b'B', 0x10])), "A?B?");
        assert_eq!(fmt_fps(30.0), "30");
        assert_eq!(fmt_fps(30000.0 / 1001.0), "29.97");
        assert_eq!(fmt_fps(7.5), "7.5");
        assert_eq!(fps_of(sys::Fract { numerator: 2, denominator: 25 }), Some(12.5));
        assert_eq!(fps_of(sys::Fract { numerator: 0, denominator: 25 }), None);
        let d = Sizes::Discrete {
            sizes: vec![
                SizeReport { width: 320, height: 180, fps: vec![1.0, 30.0, 60.0] },
                SizeReport { width: 640, height: 480, fps: vec![30.0] },
                SizeReport { width: 1920, height: 1080, fps: vec![] },
            ],
            truncated: false,
        };
        assert_eq!(sizes_text(&d), "320x180 (1-60 fps), 640x480 (30 fps), 1920x1080");
        let many = Sizes::Discrete { sizes: (1..=10).map(|i| SizeReport { width: i, height: i, fps: vec![] }).collect(), truncated: false };
        assert_eq!(sizes_text(&many), "1x1, 2x2, 3x3, 4x4, 5x5, 6x6, 7x7, 8x8, ... (10 sizes)");
        let step = Sizes::Stepwise { min: [32, 32], max: [640, 480], step: [8, 8], continuous: false };
        assert_eq!(sizes_text(&step), "32x32 to 640x480 in steps of 8x8");
        let cont = Sizes::Stepwise { min: [1, 1], max: [4096, 2160], step: [1, 1], continuous: true };
        assert_eq!(sizes_text(&cont), "any size from 1x1 to 4096x2160");
    }

    #[test]
    fn long_format_lists_wrap_without_trailing_spaces() {
        let items: Vec<String> = (0..40).map(|i| format!("F{i:03}")).collect();
        let w = wrapped(&items, "  ");
        let lines: Vec<&str> = w.lines().collect();
        assert!(lines.len() > 1, "{w}");
        assert!(lines.iter().all(|l| l.len() <= 100 && !l.ends_with(' ')), "{w}");
        assert!(lines[1].starts_with("  F0") && lines[0].ends_with(','), "{w}");
        assert_eq!(w.replace(",\n  ", ", "), items.join(", "));
    }

    #[test]
    fn passwd_and_group_files_are_read() {
        let passwd = "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/bash\n";
        assert_eq!(id_name_in(passwd, 1000).as_deref(), Some("alice"));
        assert_eq!(id_name_in(passwd, 7), None);
        let group = "video:x:44:alice,bob\nzcpipe:x:990:\n";
        assert_eq!(id_name_in(group, 990).as_deref(), Some("zcpipe"));
        assert_eq!(group_members_in(group, "video"), ["alice", "bob"]);
        assert!(group_members_in(group, "zcpipe").is_empty());
    }

    #[test]
    fn no_heap_dir_is_a_problem_naming_the_heaps_and_the_kernel_options() {
        let d = tempfile::tempdir().unwrap();
        let paths = tmp_paths(d.path());
        let mut problems = vec![];
        let (heaps, choices, auto) = heaps_section(&paths, &mut problems);
        assert!(heaps.is_empty());
        assert!(choices.iter().all(|c| c.heap.is_none()));
        assert_eq!(problems.len(), 1, "{problems:?}");
        let p = &problems[0];
        assert_eq!(p.about, paths.heap_dir.display().to_string());
        for name in ["does not exist", "system (--heap system)", "system-dma32 or dma32 (--heap dma32)", "linux,cma or cma or reserved (--heap cma)"] {
            assert!(p.what.contains(name), "{}", p.what);
        }
        assert!(p.fix.contains("CONFIG_DMABUF_HEAPS=y") && p.fix.contains("CONFIG_DMABUF_HEAPS_SYSTEM=y"), "{}", p.fix);
        assert_eq!((auto.allocator.as_deref(), auto.dma_buf), (Some("memfd"), false));
        // And without udmabuf either, that is a second problem.
        let u = udmabuf_section(&paths, false, &mut problems);
        assert!(!u.present);
        assert_eq!(problems.len(), 2);
        assert!(problems[1].fix.contains("modprobe udmabuf") && problems[1].fix.contains("CONFIG_UDMABUF"), "{:?}", problems[1]);
        // With a usable heap, a missing udmabuf is not a problem.
        let mut none = vec![];
        udmabuf_section(&paths, true, &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn heaps_map_to_their_heap_choice_and_auto_takes_system() {
        let d = tempfile::tempdir().unwrap();
        let paths = tmp_paths(d.path());
        std::fs::create_dir(&paths.heap_dir).unwrap();
        for n in ["system", "linux,cma", "reserved", "vendor-secure"] {
            std::fs::write(paths.heap_dir.join(n), b"").unwrap();
        }
        let mut problems = vec![];
        let (heaps, choices, auto) = heaps_section(&paths, &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        let names: Vec<&str> = heaps.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["linux,cma", "reserved", "system", "vendor-secure"]);
        let by = |n: &str| heaps.iter().find(|h| h.name == n).unwrap();
        assert_eq!((by("system").choice.as_deref(), by("system").used_by_choice), (Some("system"), true));
        assert_eq!((by("linux,cma").choice.as_deref(), by("linux,cma").used_by_choice), (Some("cma"), true));
        assert_eq!((by("reserved").choice.as_deref(), by("reserved").used_by_choice), (Some("cma"), false));
        assert_eq!(by("vendor-secure").choice, None);
        assert!(heaps.iter().all(|h| h.openable && h.read_write));
        let c: Vec<(&str, Option<&str>)> = choices.iter().map(|c| (c.choice.as_str(), c.heap.as_deref())).collect();
        assert_eq!(c, [("system", Some("system")), ("dma32", None), ("cma", Some("linux,cma"))]);
        assert_eq!(auto.allocator, Some(format!("dma-heap {}", paths.heap_dir.join("system").display())));
        assert!(auto.dma_buf);
        // Only an unknown name: a problem.
        std::fs::remove_dir_all(&paths.heap_dir).unwrap();
        std::fs::create_dir(&paths.heap_dir).unwrap();
        std::fs::write(paths.heap_dir.join("vendor-secure"), b"").unwrap();
        let mut problems = vec![];
        heaps_section(&paths, &mut problems);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].what.contains("it has vendor-secure"), "{:?}", problems[0]);
    }

    #[test]
    fn permission_fixes_name_the_group_to_join_or_the_udev_rules() {
        let mode = |group: &str, gid: u32, bits: u32| FileMode {
            owner: "root".into(),
            group: group.into(),
            mode: format!("{bits:04o}"),
            char_device: true,
            gid,
            bits,
        };
        let p = Path::new("/dev/video9");
        // Group root: never "join root", but the rules or root.
        let fix = access_fix(p, Some(&mode("root", 0, 0o660)));
        assert!(fix.contains("belongs to group root") && fix.contains("udev/99-zcpipe.rules") && !fix.contains("-aG root"), "{fix}");
        // The group may not open it: only the rules help.
        let fix = access_fix(p, Some(&mode("video", 54321, 0o600)));
        assert!(fix.contains("its group video may not read and write it (mode 0600)") && fix.contains("usermod -aG zcpipe"), "{fix}");
        // A group that may open it (and that this process is not in): join it, or use the rules.
        let fix = access_fix(p, Some(&mode("camgrp54321", 54321, 0o660)));
        assert!(fix.starts_with("join its group: sudo usermod -aG camgrp54321 $USER") && fix.contains("udev/99-zcpipe.rules"), "{fix}");
        // Already the rules' group: joining it is the whole fix.
        let fix = access_fix(p, Some(&mode("zcpipe", 54322, 0o660)));
        assert_eq!(fix, "join its group: sudo usermod -aG zcpipe $USER, then log in again; or run as root");
    }

    #[test]
    fn soc_and_npu_version_come_from_their_files() {
        let d = tempfile::tempdir().unwrap();
        let paths = tmp_paths(d.path());
        let s = soc_section(&paths);
        assert_eq!((s.soc.as_ref(), s.is_rockchip()), (None, false));
        assert!(s.error.as_deref().unwrap().contains("does not exist: no device tree"), "{s:?}");
        std::fs::write(&paths.compatible, b"radxa,rock-5b\0rockchip,rk3588\0").unwrap();
        std::fs::write(&paths.model, b"Radxa ROCK 5B\0").unwrap();
        let s = soc_section(&paths);
        assert_eq!(s.compatible, ["radxa,rock-5b", "rockchip,rk3588"]);
        assert_eq!((s.soc.as_deref(), s.model.as_deref(), s.is_rockchip()), (Some("rockchip,rk3588"), Some("Radxa ROCK 5B"), true));
        let n = npu_section(&paths);
        assert!(n.version.is_none() && n.error.as_deref().unwrap().contains("debug-version"), "{n:?}");
        std::fs::write(&paths.npu_version[1], "RKNPU driver: v0.9.6\n").unwrap();
        let n = npu_section(&paths);
        assert_eq!(n.version.as_deref(), Some("RKNPU driver: v0.9.6"));
        assert_eq!(n.path, Some(paths.npu_version[1].display().to_string()));
    }

    #[test]
    fn dlopen_finds_libc_and_names_what_it_cannot_find() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<String>>();
        // The first name is absent, the second (libc itself) loads.
        let ok = check_library(&names(&["libzcpipe-absent.so", "libc.so.6"]));
        assert!(ok.loaded && ok.error.is_none(), "{ok:?}");
        assert_eq!((ok.name.as_str(), ok.loaded_as.as_deref()), ("libzcpipe-absent.so", Some("libc.so.6")));
        assert!(ok.path.as_deref().is_some_and(|p| p.contains("/libc.so")), "{ok:?}");
        let no = check_library(&names(&["libzcpipe-absent.so", "libzcpipe-absent.so.2"]));
        assert!(!no.loaded && no.path.is_none() && no.loaded_as.is_none());
        let e = no.error.as_deref().unwrap();
        assert!(e.contains("libzcpipe-absent.so: cannot open") && e.contains("libzcpipe-absent.so.2: cannot open"), "{e}");
    }

    #[test]
    fn holders_of_a_file_are_found_in_proc() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("held");
        let _open = File::create(&f).unwrap();
        let me = std::process::id();
        assert!(holders(&f, None).contains(&format!("pid {me} ({})", std::fs::read_to_string("/proc/self/comm").unwrap().trim())));
        assert!(holders(&f, Some(me)).is_empty());
    }

    #[test]
    fn the_text_puts_each_fix_under_its_problem() {
        let d = tempfile::tempdir().unwrap();
        let mut paths = tmp_paths(d.path());
        paths.libraries = vec![vec!["libzcpipe-absent.so".into()]];
        let r = gather(&paths);
        let t = text(&r);
        let lines: Vec<&str> = t.lines().collect();
        let n = lines.iter().filter(|l| l.starts_with("problem: ")).count();
        assert_eq!(n, r.problems.len(), "{t}");
        for (i, l) in lines.iter().enumerate() {
            if l.starts_with("problem: ") {
                assert!(lines[i + 1].starts_with("fix: "), "{t}");
            }
        }
        assert!(t.contains("== dma-buf heaps") && t.contains("== udmabuf") && t.contains("== vendor libraries =="), "{t}");
        assert!(t.contains("libzcpipe-absent.so: does not load (libzcpipe-absent.so: cannot open shared object file"), "{t}");
        assert!(t.contains("--heap auto uses: memfd"), "{t}");
    }
}

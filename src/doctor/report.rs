//! The report: everything doctor found, as the `--json` object ([`Report`]) and the text
//! ([`super::text`]) show it. Plain data.

use serde::Serialize;

use super::{FileMode, Role};

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
    /// The DRM cards (`/dev/dri/card*`) and what `--display` and `--heap drm` can do here.
    pub drm: DrmReport,
    /// The vendor libraries, `dlopen`ed by soname.
    pub libraries: Vec<LibraryReport>,
    /// The SoC, from the device tree.
    pub soc: SocReport,
    /// The RKNPU driver's version, if a version file was readable.
    pub npu_driver: NpuReport,
    /// MPP's service node (`/dev/mpp_service`): the hardware video decoders' way in.
    pub mpp_service: ServiceNodeReport,
    /// Every problem found, each with its fix, in section order.
    pub problems: Vec<Problem>,
    /// The plan `zcpipe run` with no flags would use here ([`crate::plan`]); `None` when
    /// it could not be made (`plan_error` says why) or was not asked for.
    pub plan: Option<crate::plan::Plan>,
    /// Why there is no plan.
    pub plan_error: Option<String>,
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

/// What `--heap auto` does here: the result of [`Allocator::open`](zcpipe_core::dmabuf::Allocator::open).
#[derive(Clone, Debug, Serialize)]
pub struct AutoReport {
    /// [`Allocator::describe`](zcpipe_core::dmabuf::Allocator::describe): `dma-heap
    /// /dev/dma_heap/system`, `udmabuf`, `memfd`.
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

/// A vendor driver's device node (`/dev/mpp_service`).
#[derive(Clone, Debug, Serialize)]
pub struct ServiceNodeReport {
    /// The path.
    pub path: String,
    /// It exists.
    pub present: bool,
    /// Owner, group, mode.
    pub file: Option<FileMode>,
    /// This user can open it read-write (what the vendor library does).
    pub openable: bool,
    /// Why it could not be opened.
    pub error: Option<String>,
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

/// The DRM section: `/dev/dri` and its primary nodes.
#[derive(Clone, Debug, Serialize)]
pub struct DrmReport {
    /// The directory looked at, `/dev/dri`.
    pub dir: String,
    /// Every `cardN` in it, in numeric order.
    pub cards: Vec<DrmCardReport>,
    /// Whether `--display` can show frames here.
    pub display: Verdict,
    /// Whether `--heap drm` can allocate here.
    pub heap_drm: Verdict,
}

/// Whether a feature can work here, and if not why and the fix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// It can work.
    pub can_work: bool,
    /// What it would use, or why it cannot.
    pub why: String,
    /// What to do when it cannot.
    pub fix: Option<String>,
}

impl Verdict {
    /// It can work, using `what`.
    pub fn can(what: impl Into<String>) -> Verdict {
        Verdict { can_work: true, why: what.into(), fix: None }
    }

    /// It cannot, because `why`; `fix` says what to do.
    pub fn cannot(why: impl Into<String>, fix: impl Into<String>) -> Verdict {
        Verdict { can_work: false, why: why.into(), fix: Some(fix.into()) }
    }
}

/// One DRM primary node (`/dev/dri/cardN`).
#[derive(Clone, Debug, Serialize)]
pub struct DrmCardReport {
    /// `/dev/dri/cardN`.
    pub path: String,
    /// Owner, group, mode.
    pub file: Option<FileMode>,
    /// Why it could not be opened read-write (`None`: it was).
    pub error: Option<String>,
    /// The open failed with `EACCES`.
    pub permission_denied: bool,
    /// The kernel driver (`vkms`, `rockchip`, `i915`), from `DRM_IOCTL_VERSION`.
    pub driver: Option<String>,
    /// It makes dumb buffers (`DRM_CAP_DUMB_BUFFER`): what `--heap drm` allocates.
    pub dumb_buffers: bool,
    /// It accepted the `DRM_CLIENT_CAP_ATOMIC` client cap (atomic modesetting).
    pub atomic: bool,
    /// Opening it made doctor DRM master (given back at once): no other process holds the
    /// display, so `--display` can set modes.
    pub master_free: bool,
    /// When the master role is taken: the processes with the node open that doctor may see
    /// (`pid 812 (Xorg)`).
    pub holders: Vec<String>,
    /// Its connectors, writeback ones included.
    pub connectors: Vec<DrmConnectorReport>,
    /// Its CRTCs, in index order.
    pub crtcs: Vec<DrmCrtcReport>,
    /// Its planes (universal planes: primary, overlay and cursor).
    pub planes: Vec<DrmPlaneReport>,
    /// Why the KMS resources could not be read (a render-only driver has none).
    pub kms_error: Option<String>,
}

impl DrmCardReport {
    /// `/dev/dri/card0 (vkms)`.
    pub fn label(&self) -> String {
        match &self.driver {
            Some(d) => format!("{} ({d})", self.path),
            None => self.path.clone(),
        }
    }
}

/// One connector.
#[derive(Clone, Debug, Serialize)]
pub struct DrmConnectorReport {
    /// The object id.
    pub id: u32,
    /// Type and type index, as the kernel names it (`HDMI-A-1`, `Virtual-1`, `Writeback-1`).
    pub name: String,
    /// `connected`, `disconnected` or `unknown`.
    pub state: String,
    /// A writeback connector (it writes the CRTC's output to memory: no display).
    pub writeback: bool,
    /// Its modes, in the driver's order.
    pub modes: Vec<DrmModeReport>,
}

/// One display mode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DrmModeReport {
    /// The mode's name (`1920x1080`).
    pub name: String,
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
    /// Vertical refresh, Hz.
    pub refresh_hz: u32,
    /// `DRM_MODE_TYPE_PREFERRED`: the sink's own choice.
    pub preferred: bool,
}

impl DrmModeReport {
    /// `1920x1080@60`.
    pub fn label(&self) -> String {
        format!("{}x{}@{}", self.width, self.height, self.refresh_hz)
    }
}

/// One CRTC.
#[derive(Clone, Debug, Serialize)]
pub struct DrmCrtcReport {
    /// The object id.
    pub id: u32,
    /// Its index (the bit of planes' `possible_crtcs`).
    pub index: u32,
    /// The mode it scans out now, if active (`1024x768@60`).
    pub mode: Option<String>,
}

/// One plane.
#[derive(Clone, Debug, Serialize)]
pub struct DrmPlaneReport {
    /// The object id.
    pub id: u32,
    /// `primary`, `overlay` or `cursor` (its `type` property), else `unknown`.
    pub kind: String,
    /// The CRTC ids it can be shown on (`possible_crtcs`).
    pub crtcs: Vec<u32>,
    /// Its pixel formats as fourccs (`XR24`, `AR24`, `NV12`), in the driver's order.
    pub formats: Vec<String>,
}
